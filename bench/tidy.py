"""A night's memory tidy-up for a person with 1,000 memories: tokens and wall time.

Real PostgreSQL (embedded or DATABASE_URL) and the product's offline embedder;
a scripted model answers the two structured calls (it names no pair and no
change, so the numbers are the cost of asking). 1,000 generated personal
memories (bench/memory_corpus.py) were saved the previous days; `--today`
of them (default 50) are saved on the day of the run, 10 of those exact
repeats of older ones (merged without a model call).

    python bench/tidy.py [--memories 1000] [--today 50] [--delay-ms 0] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import bench_database, machine_line  # noqa: E402
from bench.memory_corpus import memories  # noqa: E402
from bench.results import add_record_option, record_if_asked  # noqa: E402


async def measure(total: int, today: int, delay_ms: int) -> dict:
    """Run one tidy-up; returns the figures of the table."""
    from panager.agent.flows.tidy import MemoryTidyJob
    from panager.app import App
    from panager.clock import FakeClock
    from panager.config import Settings
    from tests.fakes.scripted_model import ScriptedChatModel, call

    texts = memories(total)
    clock = FakeClock(datetime(2026, 11, 20, 9, 0, tzinfo=UTC))
    model = ScriptedChatModel(delay=delay_ms / 1000)
    model.add(call("SupersededMemories", {"superseded": []}),
              call("ProfileChanges", {"changes": []}))
    async with bench_database() as url:
        settings = Settings(_env_file=None, database_url=url, home=Path(tempfile.mkdtemp()),
                            timezone="UTC", access="open", embedding_model="local")
        app = await App.start(settings, clock=clock, model=model)
        user = await app.local_user()
        memory = app.deps.memory
        for text in texts[: total - today]:
            await memory.save(user.id, text)
        clock.set(datetime(2026, 11, 21, 9, 0, tzinfo=UTC))
        for text in texts[total - today :]:
            await memory.save(user.id, text)
        async with app.pool.connection() as conn:  # exact repeats that slipped past saving
            await conn.execute(
                "INSERT INTO memories (user_id, content, category, source, embedding, "
                "created_at, updated_at) SELECT user_id, upper(content), category, source, "
                "embedding, %s, %s FROM memories WHERE user_id = %s ORDER BY created_at LIMIT 10",
                (clock.now(), clock.now(), user.id),
            )
        await app.deps.usage.record(user, "scripted", {"input_tokens": 1, "total_tokens": 1})
        job = await app.deps.system_jobs.ensure(user, "tidy", "03:00", "FREQ=DAILY")
        assert job is not None
        now = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
        clock.set(now)
        started = time.perf_counter()
        result = await MemoryTidyJob(app.deps, model).run(user, job, now)
        wall = time.perf_counter() - started
        await app.stop()
    return {"wall_s": wall, "calls": len(model.requests), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--today", type=int, default=50)
    parser.add_argument("--delay-ms", type=int, default=0, help="fake model latency per call")
    add_record_option(parser, "tidy")
    args = parser.parse_args()
    r = asyncio.run(measure(args.memories, args.today, args.delay_ms))
    print(f"# Memory tidy-up ({machine_line()}; fake model delay {args.delay_ms} ms)\n")
    print("| memories | saved that day | merged | superseded | proposed | model calls | "
          "tokens | wall time (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.memories:,} | {args.today} | {r['merged']} | {r['superseded']} | "
          f"{r['proposed']} | {r['calls']} | {r['tokens']:,} | {r['wall_s']:.2f} |")
    record_if_asked(args, "tidy", {"tokens": r["tokens"], "wall_s": r["wall_s"]},
                    full={"memories": 1000, "today": 50, "delay_ms": 0})


if __name__ == "__main__":
    main()
