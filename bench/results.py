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

A bench script calls `record(area, values)` after its run; `bench/run_all.py` reads every
file and writes BENCHMARKS.md (the latest value of each metric, and its change since the
run before). `.ci/run` records the test suite's wall time the same way (area "suite").
"""

from __future__ import annotations

import json
import os
import platform
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
