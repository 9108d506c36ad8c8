"""After `./scripts/test` in CI: print the suite's wall time, record it for the dashboard.

    python .ci/suite_time.py LOG SECONDS [--install-check ok|failed]

LOG is the test command's output, SECONDS its wall time (set-up, ruff, lint-imports,
mypy and pytest). Appends the run to bench/results/suite.json (BENCHMARKS.md's "Test
suite" table: `bench/run_all.py --dashboard`) and prints pytest's summary line last.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import record  # noqa: E402

BUDGET_S = 12 * 60
SUMMARY = re.compile(r"^=*\s*(?P<counts>(\d+ \w+(, )?)+) in (?P<seconds>[\d.]+)s")
METRICS = {
    "scripts_test_s": {
        "label": "`./scripts/test` in CI: set-up, ruff, lint-imports, mypy and pytest",
        "unit": "s", "better": "lower", "target": "≤ 720 s (12 min, fresh clone, 2 cores)",
        "compare": "2026-11-25: 409 s for 517 tests",
    },
    "pytest_s": {
        "label": "… of which pytest (xdist: one worker more than the cores)", "unit": "s", "better": "lower",
        "target": "≤ 480 s", "compare": "",
    },
    "tests": {
        "label": "… tests passed", "unit": "", "better": "higher", "target": "", "compare": "",
    },
}


def summary_line(log: str) -> str:
    """pytest's last summary line ('893 passed, 2 warnings in 1016.5s'), or ''."""
    lines = [line for line in log.splitlines() if SUMMARY.match(line.strip())]
    return lines[-1].strip() if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("seconds", type=float)
    parser.add_argument("--install-check", default="")
    args = parser.parse_args()
    log = args.log.read_text(errors="replace")
    line = summary_line(log)
    found = SUMMARY.match(line.strip("= ")) if line else None
    wall = round(args.seconds)
    print(f"\nsuite wall time: {wall // 60} min {wall % 60:02d} s "
          f"(budget {BUDGET_S // 60} min: {'within' if wall <= BUDGET_S else 'OVER'})")
    if found:
        pytest_s = float(found["seconds"])
        passed = re.search(r"(\d+) passed", found["counts"])
        print(f"  pytest {pytest_s:.0f} s; set-up, ruff, lint-imports and mypy "
              f"{wall - pytest_s:.0f} s")
        values = {"scripts_test_s": wall, "pytest_s": round(pytest_s)}
        if passed:
            values["tests"] = int(passed[1])
        note = "" if "failed" not in found["counts"] and "error" not in found["counts"] else (
            f"not all passed: {found['counts']}")
        path = record("suite", values, metrics=METRICS, title="Test suite",
                      history="Test suite", note=note)
        print(f"  recorded in {path.relative_to(ROOT)}")
    if args.install_check:
        print(f"install check (Python's own pip): {args.install_check}")
    if line:
        print(line)


if __name__ == "__main__":
    main()
