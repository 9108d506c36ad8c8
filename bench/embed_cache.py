"""An embedder wrapper for benchmarks: vectors cached on disk by text, filled in batches.

The recall benchmark saves every turn of long conversations one by one through
`MemoryService.save`, which embeds each text alone; `prepare` embeds all the
texts first in batches (several times faster) and keeps them in
`~/.cache/panager-bench/recall-<embedder>-<role>.npz` ($XDG_CACHE_HOME is
honoured), so a second run embeds nothing. The service still goes through its
own save and search code; only the model call is skipped for a known text.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "panager-bench"
BATCH = 64


class CachedEmbedder:
    """Delegates to `inner`; texts seen before (or prepared) are not embedded again."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.fresh = 0  # texts embedded by the model in this process
        self._vectors: dict[str, dict[str, np.ndarray]] = {
            role: self._load(role) for role in ("passage", "query")
        }

    @property
    def dim(self) -> int:
        return self.inner.dim

    def _path(self, role: str) -> Path:
        return CACHE / f"recall-{self.name.replace(':', '_').replace('/', '_')}-{role}.npz"

    def _load(self, role: str) -> dict[str, np.ndarray]:
        path = self._path(role)
        if not path.exists():
            return {}
        data = np.load(path, allow_pickle=False)
        return dict(zip(data["texts"].tolist(), data["vectors"], strict=True))

    def save(self) -> None:
        """Write the cache (both roles)."""
        CACHE.mkdir(parents=True, exist_ok=True)
        for role, known in self._vectors.items():
            if known:
                texts = np.array(list(known), dtype=str)
                np.savez(self._path(role), texts=texts, vectors=np.stack(list(known.values())))

    async def prepare(self, texts: list[str], role: str) -> None:
        """Embed the unknown `texts` in batches (progress on stderr)."""
        known = self._vectors[role]
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        started = time.perf_counter()
        for i in range(0, len(todo), BATCH):
            await self._embed(todo[i : i + BATCH], role)
            if i // BATCH % 20 == 0 or i + BATCH >= len(todo):
                done = min(i + BATCH, len(todo))
                rate = done / (time.perf_counter() - started)
                print(f"  embedding ({role}): {done:,}/{len(todo):,} ({rate:.0f}/s)",
                      file=sys.stderr, flush=True)

    async def _embed(self, texts: list[str], role: str) -> list[np.ndarray]:
        known = self._vectors[role]
        todo = [t for t in dict.fromkeys(texts) if t not in known]
        if todo:
            method = self.inner.embed_queries if role == "query" else self.inner.embed
            for text, vector in zip(todo, await method(todo), strict=True):
                known[text] = np.asarray(vector, dtype=np.float32)
            self.fresh += len(todo)
        return [known[t] for t in texts]

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        return await self._embed(texts, "passage")

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        return await self._embed(texts, "query")
