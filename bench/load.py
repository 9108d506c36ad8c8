"""Load: many Discord users write at once to one real `panager run`; throughput and latency.

    .venv/bin/python bench/load.py                 # 200 users × 5 DMs (about a minute idle)
    .venv/bin/python bench/load.py --users 40      # the suite's size
    .venv/bin/python bench/load.py --record        # and append the figures to load.json

Runs the reliability suite's load test (tests/reliability/test_load.py) with
PANAGER_LOAD_USERS users: one `panager run --components discord,worker`
against the fake Discord and a fake model that takes 200 ms and echoes each
message. The test still checks every answer (all answered, each user's in
order, no foreign marker); this script prints what it measured and, with
`--record` at 200 users, records it in bench/results/load.json. The suite runs
the same test at 40 users for its correctness checks only.
"""

from __future__ import annotations

import argparse
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
}


def main() -> None:
    """Run the load test at the given size, print its numbers, record them if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    add_record_option(parser, "load")
    args = parser.parse_args()
    report = Path(tempfile.mkstemp(prefix="panager-load-", suffix=".json")[1])
    report.unlink()
    env = dict(os.environ, PANAGER_LOAD_USERS=str(args.users),
               PANAGER_RELIABILITY_REPORT=str(report))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n0",
               "tests/reliability/test_load.py"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not report.exists():
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
        sys.exit(done.returncode or 1)
    (numbers,) = json.loads(report.read_text()).values()
    report.unlink()
    print(machine_line())
    print(f"\n{'load':<24} value")
    for key, value in numbers.items():
        print(f"{key:<24} {value}")
    record_if_asked(args, "load", {key: numbers[key] for key in METRICS},
                    full={"users": 200}, metrics=METRICS)


if __name__ == "__main__":
    main()
