"""The learned injection gate (services/memory/gate.py), fitted and held out.

    .venv/bin/python bench/memory_recall.py --legs /tmp/legs.pkl   # search once, keep the legs
    .venv/bin/python bench/recall_gate.py /tmp/legs.pkl            # fit, hold out, print

Leave one conversation out: for each conversation, a logistic model over
`gate.features` is fitted on the other eleven (each of a question's best hits a
positive when it answers the question; every hit of a message unrelated to any memory a
negative), and its threshold and limit are chosen there by RULE; the held-out
conversation is then scored with them. "Pooled" adds the held-out counts up. The gate
that ships is the same fit and rule on all conversations; its constants are printed
for services/memory/gate.py. bench/memory_recall.py calls `gate_table` too.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from panager.services.memory.fusion import DEFAULT_FUSION, fuse
from panager.services.memory.gate import FEATURES, Gate, features

LOOK = 5  # hits per message the gate may look at
LIMITS = (1, 2, 3, 5)
THRESHOLDS = [round(0.05 + 0.01 * i, 2) for i in range(85)]
MIN_PRECISION, MIN_QUIET = 0.45, 0.75
RULE = (f"the highest recall of answering turns at precision ≥ {MIN_PRECISION} with at least "
        f"{MIN_QUIET:.0%} of unrelated messages injecting nothing")
STEPS, RATE, L2 = 3000, 0.5, 1e-3


def rows_of(q: dict) -> dict:
    """One message's gate features and which hits answer it."""
    hits = fuse(q["vector"], q["text"], 30, DEFAULT_FUSION)
    want = set(q.get("want", ()))
    x = features(hits, q["vector"], q["text"], LOOK)
    return {"x": x, "y": [h.id in want for h in hits[:LOOK]], "want": len(want)}


def fit(items: list[dict], embedder: str = "") -> Gate:
    """Logistic regression (gradient descent, L2) on every row of `items`."""
    x = np.array([r for it in items for r in it["x"]], dtype=float)
    y = np.array([v for it in items for v in it["y"]], dtype=float)
    mean, scale = x.mean(0), x.std(0) + 1e-9
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    for _ in range(STEPS):
        p = 1 / (1 + np.exp(-z @ w))
        w -= RATE * (z.T @ (p - y) / len(y) + L2 * w)
    return Gate(embedder, tuple(round(float(v), 6) for v in mean),
                tuple(round(float(v), 6) for v in scale),
                tuple(round(float(v), 6) for v in w[:-1]), round(float(w[-1]), 6), 0.5, LOOK)


def counts(items: list[dict], quiet: list[dict], gate: Gate, threshold: float, limit: int) -> dict:
    c = {"inj": 0, "good": 0, "want": 0, "any": 0, "n": len(items), "quiet": 0,
         "unrel": len(quiet)}
    for it in items:
        kept = [y for x, y in zip(it["x"][:limit], it["y"], strict=False)
                if gate.score(x) >= threshold]
        c["inj"] += len(kept)
        c["good"] += sum(kept)
        c["want"] += it["want"]
        c["any"] += bool(kept)
    for it in quiet:
        c["quiet"] += not any(gate.score(x) >= threshold for x in it["x"][:limit])
    return c


def ratios(c: dict) -> dict:
    return {"precision": c["good"] / c["inj"] if c["inj"] else 0.0,
            "recall": c["good"] / c["want"] if c["want"] else 0.0,
            "any": c["any"] / c["n"] if c["n"] else 0.0,
            "quiet": c["quiet"] / c["unrel"] if c["unrel"] else 1.0}


def choose(items: list[dict], quiet: list[dict], gate: Gate) -> Gate:
    """RULE on `items` (else the most precise gate that keeps quiet)."""
    scored = {(t, n): ratios(counts(items, quiet, gate, t, n))
              for t in THRESHOLDS for n in LIMITS}
    ok = [k for k, r in scored.items() if r["precision"] >= MIN_PRECISION and r["quiet"] >= MIN_QUIET]
    best = (max(ok, key=lambda k: (scored[k]["recall"], scored[k]["precision"])) if ok else
            max(scored, key=lambda k: (scored[k]["quiet"] >= MIN_QUIET, scored[k]["precision"])))
    return Gate(gate.embedder, gate.mean, gate.scale, gate.weights, gate.bias, best[0], best[1])


def gate_table(records: list[dict], embedder: str = "") -> dict:
    """Print the held-out table and the shipped gate; the pooled held-out figures."""
    items = [[rows_of(q) for q in rec["questions"]] for rec in records]
    quiet = [[rows_of(u) for u in rec["unrelated"]] for rec in records]
    print(f"\n### Learned injection gate (services/memory/gate.py), held out\n\nRule: {RULE}.\n")
    print("| held-out conversation | n | threshold, at most | precision | recall | questions injecting ≥1 | unrelated quiet |")
    print("|---|---|---|---|---|---|---|")
    total: dict = {}
    for i, rec in enumerate(records):
        train = [j for j in range(len(records)) if j != i]
        its = [x for j in train for x in items[j]]
        qs = [x for j in train for x in quiet[j]]
        gate = choose(its, qs, fit(its + qs))
        c = counts(items[i], quiet[i], gate, gate.threshold, gate.limit)
        total = {k: total.get(k, 0) + v for k, v in c.items()}
        r = ratios(c)
        print(f"| {rec['name']} | {len(items[i])} | {gate.threshold:.2f}, {gate.limit} | "
              f"{r['precision']:.3f} | {r['recall']:.3f} | {r['any']:.3f} | {r['quiet']:.3f} |")
    pooled = ratios(total)
    print(f"| **pooled** | {total['n']} | | **{pooled['precision']:.3f}** | **{pooled['recall']:.3f}** | "
          f"{pooled['any']:.3f} | {pooled['quiet']:.3f} |")
    every = [x for its in items for x in its]
    every_quiet = [x for qs in quiet for x in qs]
    shipped = choose(every, every_quiet, fit(every + every_quiet, embedder))
    print(f"\nShipped (fitted on all {len(records)} conversations): threshold "
          f"{shipped.threshold:.2f}, at most {shipped.limit}; features: {', '.join(FEATURES)}.\n")
    print(f"GATE = {shipped!r}\n")
    return {"gate_precision": pooled["precision"], "gate_recall": pooled["recall"],
            "gate_quiet": pooled["quiet"], "gate": shipped}


def main() -> None:
    result = pickle.loads(Path(sys.argv[1]).read_bytes())
    gate_table(result["records"], result.get("embedder", ""))


if __name__ == "__main__":
    main()
