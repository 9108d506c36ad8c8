"""The recall benchmark's data: people's chats from the `chitchat-dataset` package plus the
questions written for them (bench/data/chitchat_questions.jsonl) must fit together."""

from __future__ import annotations

import json
from collections import Counter

from bench.chitchat import PAIRS, QUESTIONS, _raw, conversations


def test_every_question_points_at_turns_that_exist() -> None:
    convs = conversations()
    assert [c.speakers for c in convs] == [names for *_, names in PAIRS]
    turns = {t.id: t for c in convs for t in c.turns}
    assert len(turns) == sum(len(c.turns) for c in convs)  # ids are unique
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    assert len(rows) >= 400
    kinds = Counter(r["kind"] for r in rows)
    assert set(kinds) == {"single-hop", "multi-hop", "temporal"}
    for row in rows:
        assert row["evidence"], row
        for turn_id in row["evidence"]:
            assert turn_id in turns, (row["question"], turn_id)
            assert turn_id.startswith(row["pair"] + "-"), row
        if row["kind"] == "multi-hop":
            assert len(set(row["evidence"])) >= 2, row
    asked = [(r["pair"], r["question"].strip().lower()) for r in rows]
    assert len(set(asked)) == len(asked)  # no question twice for one conversation


def test_conversations_are_long_and_span_many_sessions() -> None:
    for conv in conversations():
        assert len(conv.dates) >= 18 and len(conv.turns) >= 1_000
        assert conv.dates == sorted(conv.dates)
        assert all(t.text.strip() for t in conv.turns)


def test_the_pairs_are_the_ones_the_documented_rule_picks() -> None:
    stats: dict[frozenset, list[int]] = {}
    for convo in _raw().values():
        senders = frozenset(m["sender"][:8] for turn in convo["messages"] for m in turn)
        if len(senders) == 2:
            row = stats.setdefault(senders, [0, 0, 0])
            row[0] += 1
            row[1] += len(convo["messages"])
            row[2] += sum(len(m["text"]) for turn in convo["messages"] for m in turn)
    eligible = [(s, key) for key, s in stats.items() if 1_000 <= s[1] <= 3_000 and s[2] >= 100_000]
    picked = [key for _, key in sorted(eligible, key=lambda x: (-x[0][0], -x[0][1]))[:6]]
    assert set(picked) == {frozenset((a, b)) for _, a, b, _ in PAIRS}


def test_generated_corrections_change_one_value_of_a_fact() -> None:
    """Each fact of the generated dialogues gets a restated and a reworded correction: the
    same speaker, a different sentence, and a value the fact did not have."""
    from bench.memory_dialogues import corrections, dataset

    conv = dataset(1)[0]
    facts = {turn.id: (turn, slots) for turn, _, slots in conv.facts}
    fixes = corrections(conv)
    assert len(fixes) == 2 * len(facts) and {k for _, k, _ in fixes} == {"restated", "reworded"}
    for turn_id, _, text in fixes:
        turn, slots = facts[turn_id]
        assert text.startswith(f"{turn.speaker}: ") and text != turn.stored
        assert any(str(v) in turn.stored and str(v) not in text for v in slots.values()), text
