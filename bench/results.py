"""Benchmark results as JSON: one file per area, every run appended.

    bench/results/<area>.json = {
      "title": "Scheduler",                     # the dashboard's table heading
      "history": "Scheduler",                   # section of docs/benchmarks/history.md
      "metrics": {                              # what each row shows, in this order
        "burst_throughput": {
          "label": "Burst of 10,000 reminders: throughput",
          "unit": "/s",                         # printed after the value
          "better": "higher",                   # or "lower": which way is an improvement
          "target": "≥ 2,000 /s",               # text; "" when the metric has none
          "compare": "oldest-first claim, same run: 4,507 /s"
        }
      },
      "runs": [                                 # oldest first; a run may hold some metrics
        {"date": "2026-11-24", "machine": "2-core x86_64 VM", "values": {...}, "note": ""}
      ]
    }

A bench script run with `--record` (`add_record_option`) calls `record_if_asked(args, area,
values, full=...)` after its run: it records the figures only when the run had the sizes the
area's labels describe (else it says so), keyed by the metrics the file defines.
`bench/run_all.py` passes `--record` at full size (not `--quick`), then reads every
file and writes BENCHMARKS.md (the latest value of each metric, and its change since the
run before). `.ci/run` records the test suite's wall time the same way (area "suite").
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def path_of(area: str) -> Path:
    """The JSON file of an area."""
    return RESULTS / f"{area}.json"


def load(area: str) -> dict[str, Any]:
    """An area's results ({} metrics and runs when it has none yet)."""
    path = path_of(area)
    if not path.exists():
        return {"title": area.replace("_", " ").capitalize(), "history": "", "metrics": {},
                "runs": []}
    return json.loads(path.read_text())


def load_all() -> dict[str, dict[str, Any]]:
    """Every area's results, by area name, in file-name order."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}


def machine() -> str:
    """A short description of this machine: architecture, cores, CPU model, memory."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = f", {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = ""
    return f"{platform.machine()}, {os.cpu_count() or '?'} cores, {cpu}{memory}"


def record(
    area: str,
    values: dict[str, float],
    *,
    metrics: dict[str, dict[str, str]] | None = None,
    title: str | None = None,
    history: str | None = None,
    note: str = "",
    when: str | None = None,
    on: str | None = None,
) -> Path:
    """Append one run of `area` (its metric values) to bench/results/<area>.json.

    `metrics` defines (or redefines) rows; a value whose metric is not defined gets a row
    labelled with its key. `when` (YYYY-MM-DD HH:MM UTC) and `on` (the machine) default to
    now and this machine."""
    data = load(area)
    if title:
        data["title"] = title
    if history is not None:
        data["history"] = history
    for key, definition in (metrics or {}).items():
        data["metrics"][key] = {**data["metrics"].get(key, {}), **definition}
    for key in values:
        data["metrics"].setdefault(key, {"label": key.replace("_", " "), "unit": "",
                                         "better": "lower", "target": "", "compare": ""})
    run = {
        "date": when or datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": on or machine(),
        "values": values,
    }
    if note:
        run["note"] = note
    data["runs"].append(run)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = path_of(area)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def add_record_option(parser: argparse.ArgumentParser, *areas: str) -> None:
    """The `--record` flag of a bench script whose figures are rows of `areas`."""
    files = " or ".join(f"bench/results/{area}.json" for area in areas)
    parser.add_argument(
        "--record", action="store_true",
        help=f"append this run's figures to {files} (BENCHMARKS.md); only a run at the "
             "sizes its rows describe is recorded",
    )


def record_if_asked(
    args: argparse.Namespace,
    area: str,
    values: dict[str, float],
    *,
    full: dict[str, object] | None = None,
    **options: Any,
) -> Path | None:
    """With `--record`: record `values` (keys of the area's metrics) when every option named in
    `full` has the value the area's labels describe; otherwise print why nothing was recorded.

    Values that are not numbers (a section that did not run: NaN) are left out; the run is
    noted with its command line. `options` go to `record` (e.g. `metrics=`)."""
    if not getattr(args, "record", False):
        return None
    shown = f"bench/results/{area}.json"
    differs = [_option(name, getattr(args, name)) for name, want in (full or {}).items()
               if getattr(args, name) != want]
    if differs:
        wanted = ", ".join(_option(name, want) for name, want in (full or {}).items()
                           if getattr(args, name) != want)
        print(f"\nnot recorded in {shown}: this run used {', '.join(differs)}; its rows describe "
              f"{wanted}")
        return None
    defined = set(load(area)["metrics"]) | set(options.get("metrics") or {})
    unknown = sorted(set(values) - defined)
    if unknown:
        raise ValueError(f"{shown} defines no metric {', '.join(unknown)}")
    kept = {key: number for key, value in values.items() if (number := _number(value)) is not None}
    if not kept:
        print(f"\nnot recorded in {shown}: this run measured none of its figures")
        return None
    command = " ".join(["bench/" + Path(sys.argv[0]).name, *sys.argv[1:]])
    options.setdefault("note", command.replace(" --record", ""))
    path = record(area, kept, **options)
    print(f"\nrecorded in {shown}: {', '.join(kept)}")
    return path


def _option(name: str, value: object) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"no {flag}"
    return f"{flag} {value}"


def _number(value: object) -> float | None:
    """A figure for the JSON file: an int as is, a float to four significant digits (what
    the dashboard shows and a little more); None for NaN or anything not a number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    number = float(value)
    if not math.isfinite(number):
        return None
    if number == 0:
        return 0.0
    return round(number, max(0, 3 - math.floor(math.log10(abs(number)))))
