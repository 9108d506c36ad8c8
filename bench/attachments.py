"""What attachments cost: an image turn against a text turn, a voice message's round trip.

    .venv/bin/python bench/attachments.py [--turns 20] [--documents 1000] [--record]

A real app (PostgreSQL, the real graph, langchain-openai's client) talking to
the local fake OpenAI server (tests/fakes/openai_server.py) as the model and
as the transcription endpoint, both answering at once, so what is measured is
Panager's own work. Rows, alternating turn by turn in one thread:

- text turn: `run_turn` with words only;
- image turn: `MediaIntake.take` of a 1600×1200 photo-like JPEG (noise, ~1 MB:
  it barely compresses) — the type sniffed, the image checked and decoded in
  the limited subprocess, stored in PostgreSQL — then `run_turn` with it (its
  bytes read back and sent as a base64 `image_url` part); intake and turn
  timed apart;
- voice: `take` of a 30-second Ogg Opus voice message — the duration read in
  the subprocess, the file posted to /v1/audio/transcriptions — the round trip
  before the turn can start.

Prints p50/p95 in ms, and the checkpoint bytes an image turn adds.

Documents (`--documents N`, default 1,000): ingest speed — a 100-page PDF
taken in whole (extraction in the subprocess, passages embedded, stored) in
pages per second — then N documents of 10 passages each stored for one
person through DocumentService, and `document_search` timed over them (p50/p95
of distinct queries), on the shipped plan (past 3,000 passages the HNSW index)
and on an exact scan of the person's passages, alternating, in the same run. Embeddings come from the fake server (384 dimensions,
the offline embedder's width) so the rows measure Panager's side; with the
offline embedder add its per-passage cost (section "Embedders").
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, machine_line, percentile
from bench.results import add_record_option, record_if_asked


def photo() -> bytes:
    """A 1600×1200 JPEG of noise (a photo's size, without its compressibility)."""
    from PIL import Image

    img = Image.frombytes("RGB", (1600, 1200), os.urandom(1600 * 1200 * 3))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=85)
    return out.getvalue()


async def start_app(url: str, base_url: str, home: Path):
    from panager.app import App
    from panager.config import Settings

    settings = Settings(_env_file=None, database_url=url, home=home, timezone="UTC",
                        access="open", openai_base_url=base_url, openai_api_key="bench")
    return await App.start(settings)


async def checkpoint_bytes(app) -> int:
    async with app.pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b)"
            " + (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c) AS n"
        )).fetchone()
    return int(row["n"])


def row(name: str, values: list[float]) -> str:
    return (f"| {name} | {len(values)} | {percentile(values, 50):.1f} | "
            f"{percentile(values, 95):.1f} |")


async def measure(turns: int) -> dict[str, float]:
    from tests.fakes.openai_server import FakeOpenAI
    from tests.media_files import ogg_opus

    image, voice = photo(), ogg_opus(30.0)
    async with bench_database() as url, FakeOpenAI() as fake:
        fake.default_transcript = "remind me to water the plants tomorrow at nine"
        app = await start_app(url, fake.base_url, Path(tempfile.mkdtemp()))
        try:
            user = await app.deps.users.ensure(9_001, "bench")
            assistant, media = app.assistant, app.deps.media
            await assistant.run_turn(user, "warm up")
            text_ms, intake_ms, image_ms, voice_ms, grown = [], [], [], [], []
            for i in range(turns):
                started = time.perf_counter()
                await assistant.run_turn(user, f"question {i}")
                text_ms.append((time.perf_counter() - started) * 1000)
                before = await checkpoint_bytes(app)
                started = time.perf_counter()
                att = await media.take(user.id, f"photo{i}.jpg", image)
                taken = time.perf_counter()
                result = await assistant.run_turn(user, f"what is in photo {i}?",
                                                  attachments=[att])
                done = time.perf_counter()
                assert result.ok and fake.image_parts(), result.text
                intake_ms.append((taken - started) * 1000)
                image_ms.append((done - taken) * 1000)
                grown.append(await checkpoint_bytes(app) - before)
                started = time.perf_counter()
                heard = await media.take(user.id, "voice-message.ogg", voice, voice=True)
                voice_ms.append((time.perf_counter() - started) * 1000)
                assert heard.kind == "voice", heard.notice
        finally:
            await app.stop()
    totals = [a + b for a, b in zip(intake_ms, image_ms, strict=True)]
    print(machine_line())
    print(f"image: {len(image):,} bytes JPEG, 1600×1200; voice: 30 s Ogg Opus ({len(voice)} B)\n")
    print("| turn | n | p50 ms | p95 ms |\n|---|---|---|---|")
    for name, values in (("text turn (run_turn)", text_ms),
                         ("image: intake (sniff, subprocess decode, store)", intake_ms),
                         ("image: run_turn (read back, base64 part)", image_ms),
                         ("image: intake + run_turn", totals),
                         ("voice: intake (duration, transcription round trip)", voice_ms)):
        print(row(name, values))
    added = percentile(totals, 50) - percentile(text_ms, 50)
    print(f"\nadded by an image (p50): {added:.1f} ms; checkpoint bytes per image turn "
          f"(text turn included): p50 {percentile(grown, 50):,.0f}, max {max(grown):,}")
    return {"image_added_p50_ms": added, "voice_intake_p50_ms": percentile(voice_ms, 50)}


TOPICS = ["rent", "school trip", "boiler service", "insurance claim", "tax return",
          "car lease", "dentist", "warranty", "gym contract", "train season ticket"]


def doc_text(n: int) -> str:
    """Ten passages of a made-up document, number `n` (distinct words per document)."""
    topic = TOPICS[n % len(TOPICS)]
    return "\n\n".join(
        f"Section {s} of {topic} letter {n}: reference code R{n:05d}-{s}, the amount is "
        f"{(n * 37 + s * 11) % 900 + 100} euros, due on day {(n + s) % 28 + 1}, contact "
        f"office {n % 97}. " * 4 for s in range(10))


async def measure_documents(count: int, queries: int) -> dict[str, float]:
    from panager.app import App
    from panager.config import Settings
    from panager.services.media.documents import DocumentService
    from tests.media_files import pdf

    pages = [f"Page {i}. " + "The tenant keeps the garden tidy and pays on time. " * 12
             for i in range(100)]
    big = pdf(pages)
    from tests.fakes.openai_server import FakeOpenAI

    async with bench_database() as url, FakeOpenAI() as fake:
        fake.embedding_dim = 384
        settings = Settings(_env_file=None, database_url=url, home=Path(tempfile.mkdtemp()),
                            timezone="UTC", access="open", openai_base_url=fake.base_url,
                            openai_api_key="bench")
        app = await App.start(settings)
        try:
            user = await app.deps.users.ensure(9_002, "docs")
            media = app.deps.media
            started = time.perf_counter()
            att = await media.take(user.id, "lease.pdf", big)
            ingest = time.perf_counter() - started
            assert att.details.get("document_id"), att.notice
            docs: DocumentService = media.documents
            started = time.perf_counter()
            for n in range(count):
                text = doc_text(n)
                await docs.add(user.id, f"letter{n}.txt", "text/plain", text.encode(), text)
            stored = time.perf_counter() - started
            search_ms: dict[str, list[float]] = {}
            top: dict[str, list[bool]] = {}  # the best passage is from the letter asked about
            for strategy in ("exact", "auto") * 2:  # the same queries on both plans, twice
                docs.retrieval.strategy = strategy
                docs.retrieval._sizes.clear()
                for q in range(queries):
                    n = (q * 7919) % count
                    started = time.perf_counter()
                    hits = await docs.search(user.id, f"R{n:05d} {TOPICS[n % len(TOPICS)]} amount")
                    search_ms.setdefault(strategy, []).append((time.perf_counter() - started) * 1000)
                    assert hits
                    top.setdefault(strategy, []).append(hits[0].name == f"letter{n}.txt")
        finally:
            await app.stop()
    print(f"\ningest: 100-page PDF ({len(big):,} B) taken in {ingest:.2f} s = "
          f"{100 / ingest:.0f} pages/s (extract + embed {att.details.get('read_pages')} pages "
          "(fake embeddings) + store)")
    print(f"stored {count:,} documents × 10 passages in {stored:.1f} s "
          f"({count * 10 / stored:.0f} passages/s)")
    print("\n| search | n | p50 ms | p95 ms |\n|---|---|---|---|")
    plans = {"auto": "as shipped (HNSW past 3,000 passages)", "exact": "exact scan"}
    for strategy, times in search_ms.items():
        print(row(f"document_search at {count:,} documents ({count * 10:,} passages), "
                  f"{plans[strategy]}", times))
    ratio = percentile(search_ms["auto"], 50) / percentile(search_ms["exact"], 50)
    right = {k: sum(v) / len(v) for k, v in top.items()}
    print(f"\nas shipped ÷ exact scan (p50): {ratio:.2f}; best passage from the letter asked "
          f"about: {right['auto']:.0%} as shipped, {right['exact']:.0%} exact")
    return {"pdf_pages_per_s": 100 / ingest, "doc_search_p95_ms": percentile(search_ms["auto"], 95)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=50)
    add_record_option(parser, "attachments")
    args = parser.parse_args()
    values = {}
    if args.turns:
        values |= asyncio.run(measure(args.turns))
    if args.documents:
        values |= asyncio.run(measure_documents(args.documents, args.queries))
    record_if_asked(args, "attachments", values, full={"documents": 1000})


if __name__ == "__main__":
    main()
