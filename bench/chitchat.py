"""Long multi-session conversations written by people, with annotated questions.

Conversations: the BYU Perception, Control & Cognition lab's Chit-Chat Challenge
data set, as shipped in the `chitchat-dataset` package on PyPI (MIT licence,
copyright 2019 Perception, Control and Cognition Lab; 7,168 conversations,
258,145 messages typed by people chatting in pairs in 2018, each message with
its sender and timestamp). The same two people often talked again and again,
so a pair's conversations, in order, are one long multi-session dialogue.

PAIRS names the six pairs used here: among the pairs with 1,000–3,000 turns
(few enough to read whole when writing questions) and at least 100,000
characters (fewer are mostly greetings), the six with the most sessions.
Together: 171 sessions, 11,211 turns, 6 to 21 days each (April–May and
October–November 2018); one person (Kai) is in three of the pairs, one (Maya)
in two, each under the same pseudonym.

A turn is what one person typed before the other answered (the package's
message groups), joined with " / " and stored as "Name: text"; the names are
pseudonyms given here (the data set has none). A session's date is its first
message's timestamp.

Questions: bench/data/chitchat_questions.jsonl, written for this repository by
reading the transcripts (`python bench/chitchat.py --dump DIR` writes them);
each line has the pair, the question, its kind and the ids of every turn that
states the answer. Kinds:

- single-hop: one fact a person said ("What does Kyle study?");
- multi-hop: needs two or more turns, often from different sessions;
- temporal: when something happened, or what was said most recently.

The questions were written without running any retriever; what they may and may
not reuse of a turn's words is in docs/memory.md ("The recall benchmark").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.memory_dialogues import Conversation, Question, Turn

QUESTIONS = Path(__file__).resolve().parent / "data" / "chitchat_questions.jsonl"

# (key, first sender id prefix, second sender id prefix, pseudonyms in that order)
PAIRS = [
    ("p1", "60576dcf", "31267496", ("Nora", "Kai")),
    ("p2", "720840be", "31267496", ("Maya", "Kai")),
    ("p3", "720840be", "549cc1d1", ("Maya", "Dev")),
    ("p4", "95677b7a", "31267496", ("Lucas", "Kai")),
    ("p5", "afe2b8b4", "55ec6f39", ("Elena", "Omar")),
    ("p6", "994e94a5", "fde893bf", ("Kyle", "Linh")),
]


def _raw() -> dict:
    try:
        import chitchat_dataset
    except ImportError:  # pragma: no cover - a dev dependency
        sys.exit("bench/chitchat.py needs the dev dependencies: pip install -e '.[dev]'")
    return json.loads((Path(chitchat_dataset.__file__).parent / "dataset.json").read_text())


def conversations() -> list[Conversation]:
    """The six pairs' sessions in order, with their questions attached."""
    by_pair: dict[frozenset, list[dict]] = defaultdict(list)
    for convo in _raw().values():
        senders = frozenset(m["sender"][:8] for turn in convo["messages"] for m in turn)
        by_pair[senders].append(convo)
    questions = _questions()
    out = []
    for key, first, second, names in PAIRS:
        sessions = sorted(by_pair[frozenset((first, second))], key=lambda c: (c["start"], c["messages"][0][0]["timestamp"]))
        conv = Conversation(speakers=names, dates=[])
        name_of = {first: names[0], second: names[1]}
        for s, convo in enumerate(sessions):
            conv.dates.append(datetime.fromisoformat(convo["messages"][0][0]["timestamp"].replace("Z", "+00:00")))
            for t, turn in enumerate(convo["messages"]):
                text = " / ".join(m["text"].strip() for m in turn if m["text"].strip())
                if text:
                    conv.turns.append(Turn(f"{key}-s{s:02d}-t{t:03d}", name_of[turn[0]["sender"][:8]], text, s))
        conv.questions = questions.get(key, [])
        out.append(conv)
    return out


def _questions() -> dict[str, list[Question]]:
    out: dict[str, list[Question]] = defaultdict(list)
    if QUESTIONS.exists():
        for line in QUESTIONS.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["pair"]].append(Question(row["question"], row["kind"], row["evidence"]))
    return out


def dump(conv: Conversation, key: str, prompts: list[str] | None = None) -> str:
    """A transcript for writing questions: one line per turn, ids and dates."""
    lines = [f"# {key}: {conv.speakers[0]} and {conv.speakers[1]}, {len(conv.dates)} sessions, {len(conv.turns)} turns"]
    session = -1
    for turn in conv.turns:
        if turn.session != session:
            session = turn.session
            lines.append(f"\n## session {session:02d} — {conv.dates[session]:%Y-%m-%d %H:%M} UTC")
        lines.append(f"[{turn.id}] {turn.speaker}: {turn.text}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, help="write one transcript per pair into this folder")
    args = parser.parse_args()
    convs = conversations()
    for (key, *_), conv in zip(PAIRS, convs, strict=True):
        kinds: dict[str, int] = defaultdict(int)
        for q in conv.questions:
            kinds[q.kind] += 1
        span = (conv.dates[-1] - conv.dates[0]).days
        print(key, conv.speakers, len(conv.dates), "sessions", len(conv.turns), "turns", f"{span} days",
              len(conv.questions), "questions", dict(kinds))
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{key}.txt").write_text(dump(conv, key))
    ids = {t.id for c in convs for t in c.turns}
    bad = [(q.text, e) for c in convs for q in c.questions for e in q.evidence if e not in ids]
    if bad:
        sys.exit(f"unknown evidence ids: {bad[:5]}")


if __name__ == "__main__":
    main()
