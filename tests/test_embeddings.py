"""Offline embedder (no network, model inside a package) and the embedder factory."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import panager
from panager import embeddings
from panager.embeddings import (
    DEFAULT_OFFLINE_MODEL,
    OFFLINE_MODELS,
    Embedder,
    OfflineEmbedder,
    OpenAIEmbedder,
    make_embedder,
    offline_model_available,
)

PAIRS = Path(__file__).parent / "data" / "memory_pairs.jsonl"
UNRELATED = {
    "en": "The quarterly report shows revenue grew four percent in Europe.",
    "ko": "분기 보고서에 따르면 유럽 매출이 4퍼센트 늘었다.",
}
PARAPHRASES = {
    "en": [
        ("My sister Mina's birthday is March 3.", "When is my sibling's birthday?"),
        ("I take my coffee black with no sugar.", "How do I like my morning brew?"),
        ("Our wedding anniversary is September 18.", "When did I get married?"),
    ],
    "ko": [
        ("우리 강아지 이름은 초코야.", "반려견 이름이 뭐였지?"),
        ("남편은 초등학교 선생님이야.", "배우자의 직업이 뭐지?"),
        ("결혼기념일은 10월 3일이야.", "우리 부부가 식 올린 날이 언제였지?"),
    ],
}
MODELS = [
    pytest.param(
        model,
        marks=pytest.mark.skipif(not offline_model_available(model), reason=f"{model} missing"),
    )
    for model in OFFLINE_MODELS
]


@pytest.fixture(scope="module", params=MODELS)
def embedder(request) -> OfflineEmbedder:
    """One embedder per offline model, loaded once and shared by the tests of this module."""
    return OfflineEmbedder(request.param)


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity of two unit vectors."""
    return float(np.dot(a, b))


def assert_unit_vectors(vectors: list[list[float]], count: int, dim: int) -> None:
    """`count` finite vectors of length `dim` and norm 1."""
    array = np.asarray(vectors)
    assert array.shape == (count, dim)
    assert np.isfinite(array).all()
    np.testing.assert_allclose(np.linalg.norm(array, axis=1), 1.0, atol=1e-5)


def test_default_model_is_installed():
    """The default offline model's package is a dependency, never silently skipped."""
    assert offline_model_available(DEFAULT_OFFLINE_MODEL)
    assert OFFLINE_MODELS[DEFAULT_OFFLINE_MODEL].multilingual


def test_data_set_shape():
    """The retrieval data set: enough pairs per language, paraphrased questions."""
    rows = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines()]
    langs = [row["lang"] for row in rows]
    assert len(rows) >= 48 and langs.count("en") >= 24 and langs.count("ko") >= 16
    assert len({row["id"] for row in rows}) == len(rows)
    assert all(row["query"] not in row["memory"] for row in rows)


def test_construction_is_lazy_and_cheap():
    """Nothing loads until the first embed; name and dim are known up front."""
    fresh = OfflineEmbedder()
    assert fresh.name == f"local:{DEFAULT_OFFLINE_MODEL}/passage" and fresh.dim == 384
    assert fresh._backend is None
    assert isinstance(fresh, Embedder)


def test_unknown_offline_model_is_rejected():
    """A typo in the model name fails at construction, listing the known names."""
    with pytest.raises(ValueError, match=DEFAULT_OFFLINE_MODEL):
        OfflineEmbedder("no-such-model")


@pytest.mark.asyncio
async def test_unit_vectors_of_model_dim(embedder):
    """Each text gives a unit vector of the declared dimension."""
    vectors = await embedder.embed(
        ["hello", "우리 강아지 이름은 초코야.", "I'm allergic to peanuts."]
    )
    assert_unit_vectors(vectors, 3, embedder.dim)
    assert await embedder.embed([]) == []


@pytest.mark.asyncio
async def test_deterministic(embedder):
    """The same text gives the same vector, call after call."""
    texts = ["My sister Mina's birthday is March 3.", "반려견 이름이 뭐였지?"]
    first, second = await embedder.embed(texts), await embedder.embed(texts)
    np.testing.assert_allclose(first, second, atol=1e-6)


@pytest.mark.asyncio
async def test_batch_equals_single(embedder):
    """A text's vector does not depend on the batch it is embedded in."""
    texts = [a for pairs in PARAPHRASES.values() for a, _ in pairs] + ["short", "x " * 100]
    batch = await embedder.embed(texts)
    singles = [(await embedder.embed([text]))[0] for text in texts]
    np.testing.assert_allclose(batch, singles, atol=1e-4)


@pytest.mark.asyncio
async def test_paraphrase_closer_than_unrelated(embedder):
    """A paraphrased question is closer to its memory than an unrelated sentence."""
    await assert_paraphrases_closer(embedder, "en")


@pytest.mark.asyncio
async def test_korean_paraphrase_closer_than_unrelated_with_multilingual_models():
    """Korean works with every multilingual model (the default among them)."""
    multilingual = [name for name, spec in OFFLINE_MODELS.items() if spec.multilingual]
    assert DEFAULT_OFFLINE_MODEL in multilingual
    for name in multilingual:
        await assert_paraphrases_closer(OfflineEmbedder(name), "ko")


async def assert_paraphrases_closer(embedder, lang: str) -> None:
    """Each paraphrase of `lang` is closer to its memory than the unrelated sentence."""
    for memory, question in PARAPHRASES[lang]:
        mem, para, other = await embedder.embed([memory, question, UNRELATED[lang]])
        assert cosine(mem, para) > cosine(mem, other), (memory, question)


@pytest.mark.asyncio
async def test_empty_ish_inputs(embedder):
    """Empty, blank, control-character and emoji-only texts embed without error."""
    texts = ["", " ", "\n\t", "\x00", "\ud800", "😀", "?"]
    assert_unit_vectors(await embedder.embed(texts), len(texts), embedder.dim)


@pytest.mark.asyncio
async def test_very_long_input_is_truncated(embedder):
    """A 100 KB text embeds like its own prefix: it is cut to the model's token limit."""
    unit = "My sister Mina's birthday is March 3. 엄마 생신은 5월 8일이야. "
    long_text = (unit * (100_000 // len(unit.encode()) + 1))[:100_000]
    long_vec, prefix_vec = await embedder.embed([long_text, long_text[:6000]])
    assert_unit_vectors([long_vec], 1, embedder.dim)
    np.testing.assert_allclose(long_vec, prefix_vec, atol=1e-4)


@pytest.mark.asyncio
async def test_embed_does_not_block_the_event_loop(embedder):
    """Inference runs in a worker thread: other tasks keep running meanwhile."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await embedder.embed(["a sentence about the plans for the weekend"] * 4)
    task.cancel()
    assert ticks > 2


@pytest.mark.asyncio
async def test_model_loads_once_under_concurrency(monkeypatch):
    """Concurrent first calls share one model load."""
    spec = OFFLINE_MODELS[DEFAULT_OFFLINE_MODEL]
    loads = []

    def counting_load(*args):
        loads.append(threading.get_ident())
        return spec.load(*args)

    patched = dict(OFFLINE_MODELS)
    patched[DEFAULT_OFFLINE_MODEL] = dataclasses.replace(spec, load=counting_load)
    monkeypatch.setattr(embeddings, "OFFLINE_MODELS", patched)
    fresh = OfflineEmbedder()
    results = await asyncio.gather(*(fresh.embed(["same text"]) for _ in range(4)))
    assert len(loads) == 1
    assert all(result == results[0] for result in results)


NO_NETWORK_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys

    def deny(event, args):
        if event.startswith(("socket.connect", "socket.getaddrinfo", "socket.sendto",
                             "socket.gethostbyname", "urllib.Request")):
            raise RuntimeError("network use: " + event)

    sys.addaudithook(deny)
    import socket
    try:
        socket.getaddrinfo("localhost", 80)
    except RuntimeError:
        pass
    else:
        raise SystemExit("the audit hook does not deny network use")
    from panager.embeddings import OFFLINE_MODELS, OfflineEmbedder, offline_model_available

    for model in OFFLINE_MODELS:
        if offline_model_available(model):
            vectors = asyncio.run(OfflineEmbedder(model).embed(["hello", "안녕하세요"]))
            assert len(vectors) == 2 and len(vectors[0]) == 384
            print("ok", model)
    """
)


def test_runs_with_no_network():
    """A fresh process loads and runs every offline model with sockets denied."""
    src = str(Path(panager.__file__).resolve().parent.parent)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[name] = "http://127.0.0.1:9"
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for model in OFFLINE_MODELS:
        if offline_model_available(model):
            assert f"ok {model}" in done.stdout


def test_make_embedder_routes_by_name():
    """'local' is the default offline model; other names go to the OpenAI endpoint."""
    assert make_embedder("local", api_key=None, base_url=None).name == (
        f"local:{DEFAULT_OFFLINE_MODEL}/passage"
    )
    for model in OFFLINE_MODELS:
        if offline_model_available(model):
            named = make_embedder(f"local:{model}", api_key=None, base_url=None)
            assert named.name == f"local:{model}" + ("/passage" if OFFLINE_MODELS[model].roles else "")
            assert make_embedder(named.name, api_key=None, base_url=None).name == named.name
    remote = make_embedder("text-embedding-3-small", api_key="sk-test", base_url=None)
    assert isinstance(remote, OpenAIEmbedder)
    assert (remote.name, remote.dim) == ("openai:text-embedding-3-small", 1536)
    large = make_embedder("openai:text-embedding-3-large", api_key=None, base_url="http://x/v1")
    assert (large.name, large.dim) == ("openai:text-embedding-3-large", 3072)


class FakeLangchainEmbeddings:
    """Stands in for langchain's OpenAIEmbeddings: unnormalised 3-d vectors."""

    def __init__(self) -> None:
        self.inputs: list[list[str]] = []

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.inputs.append(texts)
        return [[3.0, 4.0, 0.0] for _ in texts]

    async def aembed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0]


@pytest.mark.asyncio
async def test_openai_embedder_normalises_probes_and_caps_input():
    """Unknown models get their dim probed; vectors come back unit-length; inputs capped."""
    remote = OpenAIEmbedder("some-local-model", api_key=None, base_url="http://127.0.0.1:9/v1")
    fake = FakeLangchainEmbeddings()
    remote._client = fake
    assert await remote.probe_dim() == 3
    vectors = await remote.embed(["", "가" * 10_000])
    np.testing.assert_allclose(vectors, [[0.6, 0.8, 0.0]] * 2)
    sent = fake.inputs[0]
    assert sent[0] == " " and len(sent[1].encode()) <= embeddings.OPENAI_MAX_INPUT_BYTES


@pytest.mark.asyncio
async def test_openai_embedder_against_fake_endpoint():
    """Through langchain and the openai SDK to a local fake server, with no API key."""
    from tests.fakes.openai_server import FakeOpenAI

    async with FakeOpenAI() as fake:
        remote = make_embedder("my-local-model", api_key=None, base_url=fake.base_url)
        assert await remote.probe_dim() == fake.embedding_dim
        vectors = await remote.embed(["hello", "", "안녕하세요"])
    assert_unit_vectors(vectors, 3, fake.embedding_dim)
    assert fake.embedding_requests[-1]["model"] == "my-local-model"
    assert fake.embedding_requests[-1]["input"][1] == " "


@pytest.mark.asyncio
async def test_e5_embeds_searches_as_queries_and_stored_texts_as_passages():
    """Each side gets its e5 prefix; the older space (roles=False) embeds everything as a
    query, as stored vectors made before roles were."""
    memory, question = "My sister Mina's birthday is March 3.", "When is Mina's birthday?"
    embedder = OfflineEmbedder()
    older = embeddings.legacy_embedder(f"local:{DEFAULT_OFFLINE_MODEL}")
    assert older.name == f"local:{DEFAULT_OFFLINE_MODEL}" and embedder.name.endswith("/passage")
    passage, query = (await embedder.embed([memory]))[0], (await embedder.embed_queries([memory]))[0]
    assert passage != query
    assert (await older.embed([memory]))[0] == pytest.approx(query, abs=1e-5)
    assert (await older.embed_queries([question]))[0] == pytest.approx(
        (await embedder.embed_queries([question]))[0], abs=1e-5
    )
    assert embeddings.legacy_embedder("local:all-minilm-l6-v2-int8") is None
