"""Which of a search's best hits to inject into a turn: a learned gate.

A small logistic model scores each of the best `GATE.limit` fused hits from what the
search already has — the hit's cosine similarity, how far it stands above the median and
below the best of the candidates, its place in the fused list and in each leg, how much
of the message's words it covers and the lexical leg's score — and a hit is injected
when its score reaches `GATE.threshold`. The weights were fitted by
bench/memory_recall.py (`bench/recall_gate.py`) on the chat and dialogue sets, with the
messages unrelated to any memory as negatives, and the threshold and limit chosen by the
rule in docs/memory.md (the highest recall of answering turns at precision ≥ 0.45 with at
least 75% of unrelated messages injecting nothing); held out per conversation it keeps
that precision. Fitted for one embedder's similarities: other embedders keep a bar.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

FEATURES = (
    "similarity", "above median", "below best", "place", "vector leg place",
    "lexical leg place", "coverage", "in lexical leg", "in vector leg", "lexical score",
    "best lexical score", "second above median",
)
ABSENT = 30  # the place of a hit a leg did not return (each leg returns up to 30)


@dataclass(frozen=True)
class Gate:
    """A fitted gate: standardisation, weights, threshold and how many hits it looks at."""

    embedder: str
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float
    limit: int

    def score(self, x: Sequence[float]) -> float:
        """The probability-like score of one hit's features."""
        z = self.bias + sum(
            w * (v - m) / s for w, v, m, s in zip(self.weights, x, self.mean, self.scale,
                                                    strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def features(
    hits: Sequence[object], vector: Sequence[dict], lexical: Sequence[dict], limit: int
) -> list[list[float]]:
    """The features of the first `limit` of the fused `hits` (objects with `.id` and
    `.similarity`), from the two legs' rows (`id`, `rank`, `coverage`)."""
    vector_place = {str(r["id"]): i for i, r in enumerate(vector)}
    lexical_place = {str(r["id"]): i for i, r in enumerate(lexical)}
    coverage = {str(r["id"]): float(r.get("coverage") or 0.0) for r in lexical}
    lexical_score = {str(r["id"]): float(r.get("rank") or 0.0) for r in lexical}
    sims = [float(getattr(h, "similarity", None) or 0.0) for h in hits]
    median = statistics.median(sims) if sims else 0.0
    best = sims[0] if sims else 0.0
    second = (sims[1] if len(sims) > 1 else 0.0) - median
    best_lexical = max(lexical_score.values(), default=0.0)
    rows = []
    for place, (h, sim) in enumerate(zip(hits[:limit], sims, strict=False)):
        key = str(getattr(h, "id"))  # noqa: B009 - any hit with an id (MemoryHit)
        vp, lp = vector_place.get(key, ABSENT), lexical_place.get(key, ABSENT)
        rows.append([
            sim, sim - median, best - sim, float(place), 1 / (1 + vp), 1 / (1 + lp),
            coverage.get(key, 0.0), float(key in lexical_place), float(key in vector_place),
            math.log1p(max(0.0, lexical_score.get(key, 0.0))), math.log1p(max(0.0, best_lexical)),
            second,
        ])
    return rows


E5_GATE = Gate(  # printed by bench/recall_gate.py (fitted on all 12 conversations)
    embedder="local:multilingual-e5-small-q4/passage",
    mean=(0.821046, 0.015395, 0.021301, 2.0, 0.33411, 0.290472, 0.272899, 0.557589, 0.900149,
          0.960552, 1.886847, 0.023107),
    scale=(0.034816, 0.025634, 0.029303, 1.414214, 0.337353, 0.368772, 0.328211, 0.496672,
           0.299801, 0.983077, 0.739324, 0.018664),
    weights=(0.015795, 0.746861, 0.062691, -0.740131, -0.330444, 0.228573, 0.365615, -0.866832,
             0.116061, 0.932555, 0.146669, -0.022268),
    bias=-2.34076, threshold=0.21, limit=5,
)
GATES: dict[str, Gate] = {E5_GATE.embedder: E5_GATE}  # by embedder name
