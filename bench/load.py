"""Load: many Discord users write at once to real `panager run` processes; beside `run_turn`.

    .venv/bin/python bench/load.py                 # 200 users × 5 DMs, both layouts (minutes)
    .venv/bin/python bench/load.py --users 40      # the suite's size
    .venv/bin/python bench/load.py --layouts one   # one process only
    .venv/bin/python bench/load.py --profile DIR   # each process under cProfile: DIR/<pid>.prof
    .venv/bin/python bench/load.py --record        # and append the figures to load.json

Runs the reliability suite's load test (tests/reliability/test_load.py) with
PANAGER_LOAD_USERS users against the fake Discord and a fake model that takes
200 ms and echoes each message, in two layouts: **one** `panager run
--components discord,worker`, and **split**: that process as a receiver only
(`receiver_answers: false`) plus two `panager run --components answers`
processes. The test still checks every answer (all answered, each user's in
order, no foreign marker). In the same run, before and after the drains,
`Assistant.run_turn`'s concurrent throughput is measured in this process the
way bench/turn_overhead.py measures it (50 users × 4 turns, 3 rounds, a
zero-delay model with one tool call); the table gives each drain's messages
per second and its ratio to that and to the one-process drain. With
`--record` at 200 users the figures go to bench/results/load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine_line
from bench.results import add_record_option, record_if_asked

ROOT = Path(__file__).resolve().parent.parent
METRICS = {
    "throughput_per_s": {
        "label": "200 users × 5 DMs, 200 ms model: messages answered per second",
        "unit": "/s", "better": "higher", "target": "",
        "compare": "before per-user schema reuse: 8.5 /s (2026-11-22)",
    },
    "latency_p95_s": {
        "label": "200 users × 5 DMs: latency p95 (DM sent → answer posted)",
        "unit": "s", "better": "lower", "target": "",
        "compare": "before per-user schema reuse: 102 s (2026-11-22)",
    },
    "wall_s": {
        "label": "200 users × 5 DMs: 1,000 answers, wall time",
        "unit": "s", "better": "lower", "target": "",
        "compare": "before per-user schema reuse: 118 s (2026-11-22)",
    },
    "one_vs_run_turn": {
        "label": "200 users × 5 DMs, one process: messages/s ÷ run_turn's turns/s (same run)",
        "unit": "×", "better": "higher", "target": "≥ 0.8",
        "compare": "before answer workers: ≈ 0.4× (2026-11-28)",
    },
    "split_throughput_per_s": {
        "label": "200 users × 5 DMs, a receiver + 2 answer workers: messages answered per second",
        "unit": "/s", "better": "higher", "target": "",
        "compare": "one process, same run",
    },
    "split_vs_one": {
        "label": "… a receiver + 2 answer workers ÷ one process (same run)",
        "unit": "×", "better": "higher", "target": "≥ 1.5",
        "compare": "one process = 1.00",
    },
}
LAYOUTS = ("one", "split")
TURN_USERS, USER_TURNS = 50, 4  # run_turn's concurrent shape, as in bench/turn_overhead.py



def drain(users: int, layout: str, profile: str | None) -> dict:
    """One run of the load test in `layout`; its numbers."""
    report = Path(tempfile.mkstemp(prefix="panager-load-", suffix=".json")[1])
    report.unlink()
    env = dict(os.environ, PANAGER_LOAD_USERS=str(users), PANAGER_LOAD_LAYOUT=layout,
               PANAGER_RELIABILITY_REPORT=str(report))
    if profile:
        env["PANAGER_PROFILE_DIR"] = str(Path(profile).resolve())
        Path(profile).mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n0",
               "tests/reliability/test_load.py"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not report.exists():
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
        sys.exit(done.returncode or 1)
    (numbers,) = json.loads(report.read_text()).values()
    report.unlink()
    return numbers


async def run_turn_rate() -> float:
    """`run_turn`'s turns per second, concurrent (bench/turn_overhead.py's shape and code)."""
    from bench.common import bench_database
    from bench.turn_overhead import build_app, concurrent, make_model, run_turn_turn

    async with bench_database() as url:
        app = await build_app(url, make_model(), Path(tempfile.mkdtemp(prefix="panager-bench-")))
        try:
            turn = run_turn_turn(app)
            for i in range(3):  # warm-up
                await turn(999, f"warm-up {i}")
            results, wall = await concurrent(app, {"run_turn": turn}, TURN_USERS, USER_TURNS)
        finally:
            await app.stop()
    return len(results["run_turn"]) / wall["run_turn"]


def main() -> None:
    """Run run_turn, the drains, run_turn again; print the table, record it if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--profile", default=None, help="write each process's cProfile here")
    add_record_option(parser, "load")
    args = parser.parse_args()
    layouts = [name for name in args.layouts.split(",") if name in LAYOUTS]
    before = asyncio.run(run_turn_rate())
    drains = {layout: drain(args.users, layout, args.profile) for layout in layouts}
    after = asyncio.run(run_turn_rate())
    rate = (before + after) / 2
    print(machine_line())
    print(f"\nrun_turn, {TURN_USERS} users × {USER_TURNS} turns at once: {before:.1f} turns/s "
          f"before the drains, {after:.1f} after (mean {rate:.1f})\n")
    print("| path | messages | wall s | per s | ÷ run_turn | ÷ one process | p50 s | p95 s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| run_turn (concurrent) | {TURN_USERS * USER_TURNS} × 3 | — | {rate:.1f} | 1.00 "
          "| — | — | — |")
    one = drains.get("one", {}).get("throughput_per_s")
    names = {"one": "one process", "split": "a receiver + 2 answer workers"}
    for layout, numbers in drains.items():
        per_s = numbers["throughput_per_s"]
        vs_one = f"{per_s / one:.2f}" if one else "—"
        print(f"| {names[layout]} | {numbers['messages']} | {numbers['wall_s']} | {per_s} | "
              f"{per_s / rate:.2f} | {vs_one} | {numbers['latency_p50_s']} | "
              f"{numbers['latency_p95_s']} |")
    for layout, numbers in drains.items():
        print(f"\n{names[layout]}: {numbers}")
    values: dict[str, float] = {}
    if "one" in drains:
        values.update({key: drains["one"][key] for key in ("throughput_per_s", "latency_p95_s",
                                                             "wall_s")})
        values["one_vs_run_turn"] = round(drains["one"]["throughput_per_s"] / rate, 2)
    if "split" in drains:
        values["split_throughput_per_s"] = drains["split"]["throughput_per_s"]
        if one:
            values["split_vs_one"] = round(drains["split"]["throughput_per_s"] / one, 2)
    record_if_asked(args, "load", values, full={"users": 200}, metrics=METRICS)


if __name__ == "__main__":
    main()
