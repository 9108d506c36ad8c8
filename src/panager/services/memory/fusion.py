"""Fusing the two legs of a hybrid memory search into one ranking.

Two families, both described by a `Fusion`:

- **score** (`kind="score"`):

      score = (similarity − crowd_weight · crowd) / spread
              + lexical_weight · [coverage ·] rank / best rank

  `similarity` is the cosine similarity to the query (the lexical leg computes
  it for its own hits too). `crowd` is the memory's mean similarity to its
  CROWD_K nearest fellow candidates of the vector leg (queries.py): a memory
  much like many others near the query ("Caroline: How are you doing?" said a
  dozen times) is a hub that e5 puts close to every question; subtracting part
  of it is hubness reduction (as CSLS does for word vectors), over the
  candidates only; a lexical-only hit gets the vector leg's median crowd.
  `spread` is the standard deviation of the vector leg's similarities, so the
  lexical term weighs the same against e5 (similarities bunched within ~0.1)
  and MiniLM. The lexical term is the hit's BM25 rank relative to the best
  lexical hit, optionally times its coverage (the share of the query's idf its
  words match).
- **rrf** (`kind="rrf"`): reciprocal rank fusion, Σ weight / (k + rank) over
  the top `depth` of each leg (the vector leg ordered by similarity minus
  crowd_weight · crowd).

Either family can be **woven** with the lexical leg (`lexical_every`, `weave`): every
n-th place of the ranking goes to the lexical leg's best memory not listed yet. The score
fusion alone, chosen on the other conversations, still fell below plain RRF on 3 of 12
held-out conversations; the lexical leg is what it loses (a rare word said once, that the
embedder does not single out), and weaving keeps a share of every cut for it.

The default (DEFAULT_FUSION) is chosen by leave-one-conversation-out
cross-validation over two sets of long conversations (bench/memory_recall.py;
the numbers and the rule are in docs/memory.md and BENCHMARKS.md). The
earlier score fusion (crowd 0.25, lexical 1.5 × coverage) had been tuned on
one generated set and lost to its own lexical leg on conversations it had not
seen. Ties go to the newer memory, then the text, then the id. `similarity`
itself is left as it is: the injection bar is calibrated on it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from panager.services.memory.queries import MemoryHit, hit, tie_key

MIN_SPREAD = 1e-6


@dataclass(frozen=True)
class Fusion:
    """How the two legs are combined (see the module docstring)."""

    kind: Literal["score", "rrf"] = "score"
    crowd_weight: float = 0.0
    lexical_weight: float = 1.0  # score: weight of the lexical term; rrf: of the lexical leg
    coverage: bool = True  # score: multiply the lexical term by the query's idf covered
    rrf_k: float = 60.0
    depth: int = 30  # rrf: ranks counted per leg
    # every n-th place goes to the lexical leg's best memory not listed yet (0: never);
    # see `weave`
    lexical_every: int = 0

    def label(self) -> str:
        """A short name for tables."""
        if self.lexical_every:
            plain = replace(self, lexical_every=0).label()
            return f"{plain}; every {self.lexical_every}th place lexical"
        if self.kind == "rrf":
            crowd = f", crowd {self.crowd_weight:g}" if self.crowd_weight else ""
            return f"RRF k={self.rrf_k:g} top {self.depth}, lexical ×{self.lexical_weight:g}{crowd}"
        cov = " × coverage" if self.coverage else ""
        return f"score: crowd {self.crowd_weight:g}, lexical {self.lexical_weight:g}{cov}"


PLAIN_RRF = Fusion(kind="rrf", rrf_k=60.0, depth=20)
# Every 4th place to the lexical leg: on held-out folds the score fusion alone fell below
# plain RRF on 3 of 12 conversations (5 of 108 fold × k × baseline cells, down to −0.048);
# woven with the lexical leg, on 1 (−0.007 at R@5), at the same pooled R@10
# (bench/memory_recall.py, docs/memory.md "Fusion").
WEAVE = 4
# The score part chosen by leave-one-conversation-out cross-validation over 12 conversations
# among woven fusions (BENCHMARKS.md "Memory recall"; unwoven, the same rule chose lexical
# 1.0); the score fusion used before that (crowd 0.25, lexical 1.5 × coverage) had been
# tuned on three generated conversations.
DEFAULT_FUSION = Fusion(kind="score", crowd_weight=0.5, lexical_weight=0.5, coverage=False,
                        lexical_every=WEAVE)


def fuse(
    vector: Sequence[dict], lexical: Sequence[dict], limit: int,
    fusion: Fusion = DEFAULT_FUSION,
) -> list[MemoryHit]:
    """The best `limit` memories of both legs by `fusion`'s score; ties go to the newer
    memory, then by text, then by id (never to a random id alone)."""
    rows: dict = {r["id"]: r for r in lexical}
    rows.update((r["id"], r) for r in vector)
    scores = ranking(vector, lexical, fusion)
    return [hit(rows[key], score) for key, score in scores[:limit]]


def ranking(
    vector: Sequence[dict], lexical: Sequence[dict], fusion: Fusion = DEFAULT_FUSION
) -> list[tuple]:
    """(id, fused score) of every candidate, best first (the order `fuse` returns)."""
    rows: dict = {r["id"]: r for r in lexical}
    rows.update((r["id"], r) for r in vector)
    combine = _rrf if fusion.kind == "rrf" else _score
    scores = combine(vector, lexical, fusion)
    order = sorted(scores, key=lambda key: (-scores[key], tie_key(rows[key])))
    if fusion.lexical_every:
        ranked = [r["id"] for r in lexical if r["id"] in scores]  # RRF counts its top `depth`
        order = weave(order, ranked, fusion.lexical_every)
    return [(key, scores[key]) for key in order]


def weave(fused: Sequence, lexical: Sequence, every: int) -> list:
    """`fused` with every `every`-th place given to the best of `lexical` (the BM25 leg,
    best first) not listed yet: the first `every` − 1 places from `fused`, then one from
    `lexical`, and so on; each memory once, all of both kept.

    Whatever the score fusion makes of a query, the top k then holds the lexical leg's best
    k / `every` memories: the leg that a fusion most often loses to on conversations it was
    not chosen on (a rare name or word said once) keeps a share of every cut."""
    out: list = []
    seen: set = set()
    queues = (iter(fused), iter(lexical))
    total = len(set(fused) | set(lexical))
    place = 0
    while len(out) < total:
        place += 1
        source = queues[1] if place % every == 0 else queues[0]
        key = next((k for k in source if k not in seen), None)
        if key is None:  # that side is used up: the other fills the rest
            key = next((k for k in queues[0] if k not in seen), None)
            if key is None:
                key = next((k for k in queues[1] if k not in seen), None)
            if key is None:
                break
        seen.add(key)
        out.append(key)
    return out


def _score(vector: Sequence[dict], lexical: Sequence[dict], fusion: Fusion) -> dict:
    spread, crowd = _scale(vector)
    scores = {
        r["id"]: (r["similarity"] - fusion.crowd_weight * (r.get("crowd") or 0.0)) / spread
        for r in vector
    }
    best = max((float(r["rank"]) for r in lexical), default=0.0) or 1.0
    for row in lexical:
        key = row["id"]
        if key not in scores:
            scores[key] = (float(row["similarity"] or 0.0) - fusion.crowd_weight * crowd) / spread
        share = float(row["coverage"]) if fusion.coverage else 1.0
        scores[key] += fusion.lexical_weight * share * float(row["rank"]) / best
    return scores


def _rrf(vector: Sequence[dict], lexical: Sequence[dict], fusion: Fusion) -> dict:
    ranked = sorted(
        vector, key=lambda r: -(r["similarity"] - fusion.crowd_weight * (r.get("crowd") or 0.0))
    ) if fusion.crowd_weight else list(vector)
    scores: dict = {}
    for weight, leg in ((1.0, ranked), (fusion.lexical_weight, list(lexical))):
        for place, row in enumerate(leg[: fusion.depth], start=1):
            scores[row["id"]] = scores.get(row["id"], 0.0) + weight / (fusion.rrf_k + place)
    return scores


def _scale(vector: Sequence[dict]) -> tuple[float, float]:
    """(spread of the vector leg's similarities, its median crowd)."""
    if not vector:
        return 1.0, 0.0
    sims = [float(r["similarity"]) for r in vector]
    mean = sum(sims) / len(sims)
    spread = math.sqrt(sum((s - mean) ** 2 for s in sims) / len(sims))  # pstdev, in floats
    crowd = statistics.median(float(r.get("crowd") or 0.0) for r in vector)
    return max(spread, MIN_SPREAD), crowd
