"""Fusing the two legs of a hybrid memory search into one ranking.

    score = (similarity − CROWD_WEIGHT · crowd) / spread
            + LEXICAL_WEIGHT · coverage · rank / best rank

- `similarity`: cosine similarity to the query (the vector leg; the lexical leg
  computes it for its own hits too).
- `crowd`: the memory's mean similarity to its CROWD_K nearest fellow candidates
  of the vector leg (queries.py). A memory much like many others near the query
  ("Caroline: How are you doing?", "Caroline: Thanks!", said a dozen times) is a
  hub that e5 puts close to every question about Caroline; the memory that says
  something the others do not stands apart. Subtracting part of it is hubness
  reduction (as CSLS does for word vectors), over the candidates only. A
  lexical-only hit gets the median crowd of the vector leg.
- `spread`: the standard deviation of the vector leg's similarities, so the
  lexical term weighs the same against e5 (similarities bunched within ~0.1)
  and MiniLM (spread over ~0.3).
- the lexical term: the hit's BM25 rank relative to the best lexical hit, times
  its coverage (the share of the query's idf its words match), so a memory
  matching only a common word of the query barely counts.

The first fusion was reciprocal rank fusion. RRF ignores how close the vector
scores are: a lexical hit sharing one word with a paraphrased question
reordered memories the vector leg had nearly tied, and hybrid found the right
memory first less often than the vector leg alone (R@1 0.55 vs 0.70 on
tests/data/memory_pairs.jsonl). The weights were chosen on half of
bench/memory_recall.py's conversations, with those pairs as a check, and are
reported on the other half (BENCHMARKS.md). `similarity` itself is left as it
is: the recall bar is calibrated on it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from panager.services.memory.queries import MemoryHit, hit, tie_key

CROWD_WEIGHT = 0.25
LEXICAL_WEIGHT = 1.5
MIN_SPREAD = 1e-6


def fuse(vector: Sequence[dict], lexical: Sequence[dict], limit: int) -> list[MemoryHit]:
    """The best `limit` memories of both legs by the module's score; ties go to the newer
    memory, then by text, then by id (never to a random id alone)."""
    rows: dict = {}
    scores: dict = {}
    spread, crowd = _scale(vector)
    for row in vector:
        rows[row["id"]] = row
        scores[row["id"]] = (row["similarity"] - CROWD_WEIGHT * (row.get("crowd") or 0.0)) / spread
    best = max((float(r["rank"]) for r in lexical), default=0.0) or 1.0
    for row in lexical:
        key = row["id"]
        if key not in scores:
            rows[key] = row
            scores[key] = (float(row["similarity"] or 0.0) - CROWD_WEIGHT * crowd) / spread
        scores[key] += LEXICAL_WEIGHT * float(row["coverage"]) * float(row["rank"]) / best
    order = sorted(scores, key=lambda key: (-scores[key], tie_key(rows[key])))
    return [hit(rows[key], scores[key]) for key in order[:limit]]


def _scale(vector: Sequence[dict]) -> tuple[float, float]:
    """(spread of the vector leg's similarities, its median crowd)."""
    if not vector:
        return 1.0, 0.0
    spread = statistics.pstdev(float(r["similarity"]) for r in vector)
    crowd = statistics.median(float(r.get("crowd") or 0.0) for r in vector)
    return max(spread, MIN_SPREAD), crowd
