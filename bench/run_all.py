"""Run every benchmark; regenerate the dashboard (BENCHMARKS.md) and the history beside it.

    .venv/bin/python bench/run_all.py                   # everything, recorded (tens of minutes)
    .venv/bin/python bench/run_all.py --quick           # smaller sizes, nothing recorded
    .venv/bin/python bench/run_all.py --only scheduler,load
    .venv/bin/python bench/run_all.py --list            # what would run; what is missing
    .venv/bin/python bench/run_all.py --dashboard       # rewrite BENCHMARKS.md only, run nothing

Each benchmark is a script in bench/ and runs in its own process, one after the
other, so they do not compete for the machine. A full-size run (no `--quick`)
passes `--record` to every script that records: the script then appends its
figures to bench/results/<area>.json (bench/results.py: every run appended, with
its date and machine; a script run at other sizes than its rows describe says so
and records nothing). A `--quick` run records nothing. BENCHMARKS.md is
generated from those files alone: one table per
area, each row a metric with its target, latest figure, date and machine, what
it is compared with, and its change since the previous run, linking to its
section of docs/benchmarks/history.md.

docs/benchmarks/history.md keeps the dated narrative, one `## Section` per
benchmark: the prose written by hand stays as it is; the block between the
`<!-- run_all: NAME -->` markers (command, duration, the script's output) is
replaced by this run's. Benchmarks that fail keep their previous block and are
reported at the end with the tail of their output; scripts listed below but
absent are reported as missing, and scripts in bench/ not listed here still run
(section named after the file).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OUTPUT = ROOT / "BENCHMARKS.md"
HISTORY = ROOT / "docs" / "benchmarks" / "history.md"
HELPERS = {
    "__init__.py", "chitchat.py", "common.py", "embed_cache.py", "memory_corpus.py",
    "memory_dialogues.py", "recall_cv.py", "recall_gate.py", "recall_stages.py", "results.py",
    "run_all.py",
    "scheduler_fairness.py", "scheduler_peers.py",  # parts of scheduler.py
}
MAX_DASHBOARD_LINES = 300
TIMEOUT = 3600.0
INTRO = ("The dated runs behind the dashboard (BENCHMARKS.md): each section, the command,"
         " the machine, the numbers.")


@dataclass
class Benchmark:
    """One benchmark: its section title and how to run it."""

    name: str
    title: str
    args: list[str]
    quick: list[str] = field(default_factory=list)
    script: str = ""  # bench/<script>
    record: bool = True  # takes --record (its figures are rows of bench/results/<name>.json)

    def command(self, quick: bool) -> list[str]:
        """The argv that runs it: `--quick` sizes, or full size with `--record`."""
        extra = self.quick if quick else (["--record"] if self.record else [])
        return [sys.executable, f"bench/{self.script}", *self.args, *extra]


KNOWN = [
    Benchmark(
        "scheduler",
        "Scheduler",
        [],
        ["--reminders", "2000", "--users", "200", "--rounds", "1", "--fair-agent-runs", "100"],
        "scheduler.py",
    ),
    Benchmark("system_jobs", "System jobs", [], ["--repeat", "1"], "system_jobs.py"),
    Benchmark("memory", "Memory", [], ["--quick"], "memory.py"),
    Benchmark("memory_recall", "Memory recall", [], ["--conversations", "2"], "memory_recall.py"),
    Benchmark("tidy", "Memory tidy-up", [], ["--memories", "200", "--today", "20"], "tidy.py"),
    Benchmark(  # no dashboard rows: a comparison of pgvector versions, kept in the history
        "filtered_search", "Filtered search", [], [], "filtered_search.py", record=False
    ),
    Benchmark("embedders", "Embedders", [], ["--repeat", "1"], "embedders.py"),
    Benchmark("turn_overhead", "Turn overhead", [], ["--turns", "60"], "turn_overhead.py"),
    Benchmark(
        "long_conversation", "Long conversation", [], ["--turns", "200"], "long_conversation.py"
    ),
    Benchmark(
        "small_windows", "Small context windows", ["--small-window"], ["--turns", "40"],
        "long_conversation.py",
    ),
    Benchmark("web", "Web page", [], ["--requests", "30", "--chat", "15"], "web.py"),
    Benchmark("tools", "MCP tools", ["--on-demand"], ["--calls", "50"], "tools.py"),
    Benchmark(
        "attachments", "Attachments", [], ["--turns", "5", "--documents", "100"],
        "attachments.py",
    ),
    Benchmark(
        "first_token",
        "First token",
        [],
        ["--answers", "10", "--overhead-turns", "2"],
        "first_token.py",
    ),
    Benchmark("load", "Reliability", [], ["--users", "40"], "load.py"),
    Benchmark("caldav", "Calendars: CalDAV", [], ["--repeat", "2"], "caldav.py"),
    Benchmark(
        "models", "Models", [], ["--people", "2", "--items", "6", "--ttft-turns", "2"],
        "models.py",
    ),
    Benchmark(
        "backup", "Backup", ["--memories", "20000", "--documents", "200"],
        ["--memories", "2000", "--documents", "20"], "backup.py",
    ),
]


def discover() -> tuple[list[Benchmark], list[str]]:
    """The benchmarks to run (listed ones present + unlisted scripts) and missing scripts."""
    present = {p.name for p in BENCH.glob("*.py")} - HELPERS
    found = [b for b in KNOWN if b.script in present]
    missing = [b.script for b in KNOWN if b.script not in present]
    listed = {b.script for b in KNOWN}
    for script in sorted(present - listed):
        name = script.removesuffix(".py")
        found.append(Benchmark(name, name.replace("_", " ").capitalize(), [], [], script))
    return found, missing


# ----------------------------------------------------------------------------- machine


def machine() -> dict[str, str]:
    """CPU model, cores, memory, Python and OS of this machine."""
    return {
        "CPU": _cpu_model(),
        "cores": str(os.cpu_count() or "?"),
        "memory": _memory(),
        "Python": platform.python_version(),
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "load average at start": _load(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory() -> str:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return f"{pages * size / 2**30:.1f} GiB"
    except (ValueError, OSError, AttributeError):
        return "?"


def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


# ------------------------------------------------------------------------------ running


@dataclass
class Outcome:
    """What one benchmark run produced."""

    bench: Benchmark
    command: list[str]
    seconds: float
    code: int
    output: str


def run(bench: Benchmark, quick: bool, timeout: float) -> Outcome:
    """Run one benchmark in its own process; stdout is its result, stderr its log."""
    command = bench.command(quick)
    env = dict(os.environ)
    print(f"== {bench.name}: {' '.join(_shown(command))}", flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = -1, _text(exc.stdout), _text(exc.stderr) + "\n(timed out)"
    seconds = time.monotonic() - started
    output = stdout if code == 0 else (stdout + "\n" + stderr)[-4000:]
    print(f"   {'ok' if code == 0 else f'FAILED ({code})'} in {seconds:.0f} s", flush=True)
    return Outcome(bench, command, seconds, code, output.strip())


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def _shown(command: list[str]) -> list[str]:
    return [".venv/bin/python" if part == sys.executable else part for part in command]


# ------------------------------------------------------------- docs/benchmarks/history.md


def block(outcome: Outcome, today: str) -> str:
    """The generated part of a section (between its markers)."""
    name = outcome.bench.name
    return "\n".join(
        [
            f"<!-- run_all: {name} -->",
            f"Last run by `bench/run_all.py` on {today}: `{' '.join(_shown(outcome.command))}`"
            f" — {outcome.seconds:.0f} s.",
            "",
            as_markdown(outcome.output),
            f"<!-- /run_all: {name} -->",
        ]
    )


def as_markdown(output: str) -> str:
    """A benchmark's output for the page: markdown (tables) as is, one heading level
    down; plain text fenced."""
    if re.search(r"(?m)^\|[-| :]+\|\s*$", output):
        return re.sub(r"(?m)^(#{1,5}) ", r"#\1 ", output)
    return f"````text\n{output}\n````"


def split_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(text before the first '## ', [(title, body)]) of a markdown document.

    A '## ' line inside a code fence or a generated block (a benchmark's own
    markdown output) is text, not a section."""
    head: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    fenced = generated = False
    for line in text.splitlines(keepends=True):
        if line.startswith("<!-- run_all:"):
            generated = True
        elif line.startswith("<!-- /run_all:"):
            generated = False
        elif line.startswith("```") and not generated:  # also ````
            fenced = not fenced
        elif line.startswith("## ") and not (fenced or generated):
            sections.append((line[3:].strip(), []))
            continue
        (sections[-1][1] if sections else head).append(line)
    return "".join(head), [(title, "".join(body)) for title, body in sections]


def with_block(body: str, name: str, new_block: str) -> str:
    """`body` with its generated block for `name` replaced (or appended)."""
    pattern = re.compile(
        rf"<!-- run_all: {re.escape(name)} -->.*?<!-- /run_all: {re.escape(name)} -->",
        re.DOTALL,
    )
    if pattern.search(body):
        return pattern.sub(lambda _: new_block, body)
    before = body.rstrip() + "\n\n" if body.strip() else "\n"
    return before + new_block + "\n"


def header(info: dict[str, str], today: str) -> str:
    """The document's header: intro, machine and date."""
    rows = "\n".join(f"| {key} | {value} |" for key, value in info.items())
    return (
        f"# Benchmark history\n\n{INTRO}\n\n"
        f"Regenerated by `.venv/bin/python bench/run_all.py` on {today}, on:\n\n"
        f"| | |\n|---|---|\n{rows}\n\n"
        "Each section keeps the notes written with its benchmark; the part between the\n"
        "`run_all` markers is the output of the benchmark's latest run.\n\n"
    )


def regenerate(
    existing: str, outcomes: list[Outcome], info: dict[str, str], today: str, *, whole: bool = True
) -> str:
    """BENCHMARKS.md with this run's blocks, the hand-written text kept. The header (machine,
    date of the full regeneration) is rewritten only by a run of every benchmark (`whole`);
    a partial run (`--only`) leaves it, each block carrying its own date."""
    head, sections = split_sections(existing)
    by_title = {title: body for title, body in sections}
    order = [title for title, _ in sections]
    for outcome in outcomes:
        if outcome.code != 0:
            continue  # keep the previous numbers of a failed benchmark
        title = outcome.bench.title
        if title not in by_title:
            by_title[title] = "\n"
            order.append(title)
        by_title[title] = with_block(by_title[title], outcome.bench.name, block(outcome, today))
    body = "".join(f"## {title}\n{by_title[title].rstrip()}\n\n" for title in order)
    top = header(info, today) if whole or not head.strip() else head
    return top + body.rstrip() + "\n"


# ------------------------------------------------------------------------ BENCHMARKS.md


def dashboard(results: dict[str, dict[str, Any]]) -> str:
    """BENCHMARKS.md: one table per area from the recorded results (bench/results/*.json)."""
    lines = [
        "# Benchmarks",
        "",
        "The current figure of every metric. Generated by `.venv/bin/python bench/run_all.py`",
        "(`--dashboard` rewrites this page from bench/results/*.json without running anything);",
        "do not edit by hand. Each row links to its dated runs and notes in",
        f"[docs/benchmarks/history.md]({HISTORY_LINK}). \"Change\" compares the latest run with",
        "the run before it (same metric); runs on this shared 2-core machine vary with its load,",
        "so compare ratios measured in one run before absolute figures.",
    ]
    ranked = sorted(results, key=lambda a: (AREAS.index(a) if a in AREAS else len(AREAS), a))
    for area in ranked:
        data = results[area]
        rows = [row for key in data.get("metrics", {}) if (row := _row(data, key))]
        if not rows:
            continue
        lines += ["", f"## {data.get('title') or area}", "",
                  "| metric | target | latest | date · machine | compared with | change since previous |",
                  "|---|---|---:|---|---|---|", *rows]
    return "\n".join(lines) + "\n"


HISTORY_LINK = "docs/benchmarks/history.md"
AREAS = [  # the dashboard's order; other areas follow by name
    "suite", "load", "failover", "scheduler", "system_jobs", "first_token", "turn_overhead",
    "long_conversation", "small_windows", "memory", "memory_recall", "embedders", "tidy",
    "tools", "web", "attachments", "backup", "models",
]


def anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def _row(data: dict[str, Any], key: str) -> str | None:
    runs = [run for run in data.get("runs", []) if key in run.get("values", {})]
    if not runs:
        return None
    meta = data["metrics"][key]
    latest = runs[-1]
    link = HISTORY_LINK + (f"#{anchor(data['history'])}" if data.get("history") else "")
    value = figure(latest["values"][key], meta.get("unit", ""))
    change = _change(runs, key, meta.get("better", "lower"), meta.get("unit", ""))
    cells = [f"[{meta.get('label', key)}]({link})", meta.get("target") or "—", f"**{value}**",
             f"{latest['date']} · {latest['machine']}", meta.get("compare") or "—", change]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _change(runs: list[dict[str, Any]], key: str, better: str, unit: str) -> str:
    """The latest value against the one before: relative change, and whether it is better."""
    if len(runs) < 2:
        return "first recorded run"
    before, latest = runs[-2], runs[-1]
    old, new = before["values"][key], latest["values"][key]
    since = f"{figure(old, unit)} on {before['date'].split(' ')[0]}"
    if not isinstance(old, int | float) or not isinstance(new, int | float):
        return f"was {since}"
    if old == new:
        return f"unchanged ({since})"
    if old == 0:
        return f"was {since}"
    percent = (new - old) / abs(old) * 100
    improved = (percent > 0) == (better == "higher")
    return f"{percent:+.1f}% {'better' if improved else 'worse'} (was {since})"


def figure(value: float, unit: str = "") -> str:
    """A value for the table: thousands separated, three significant digits below 100."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{value}{' ' + unit if unit else ''}"
    number = float(value)
    if number.is_integer() and abs(number) >= 1:
        text = f"{int(number):,}"
    elif abs(number) >= 100:
        text = f"{number:,.0f}"
    elif abs(number) >= 10:
        text = f"{number:.1f}"
    elif abs(number) >= 1:
        text = f"{number:.2f}"
    else:
        text = f"{number:.3g}"
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("%", "×") else f"{text} {unit}"


def write_dashboard() -> str:
    """Rewrite BENCHMARKS.md from bench/results/*.json; refuse a page over its line budget."""
    sys.path.insert(0, str(ROOT))
    from bench.results import load_all

    text = dashboard(load_all())
    count = text.count("\n")
    if count > MAX_DASHBOARD_LINES:
        raise SystemExit(f"BENCHMARKS.md would have {count} lines (at most "
                         f"{MAX_DASHBOARD_LINES}): fold rows or move detail to the history")
    OUTPUT.write_text(text)
    return f"wrote {OUTPUT.relative_to(ROOT)} ({count} lines)"


def main() -> None:
    """Run the benchmarks, then rewrite the history's blocks and BENCHMARKS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated names (see --list)")
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes, for a smoke run (records no results)")
    parser.add_argument("--list", action="store_true", help="show the benchmarks and exit")
    parser.add_argument("--dashboard", action="store_true",
                        help="rewrite BENCHMARKS.md from bench/results/*.json and exit")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per benchmark")
    args = parser.parse_args()
    if args.dashboard:
        print(write_dashboard())
        return
    benches, missing = discover()
    for script in missing:
        print(f"missing: bench/{script} (listed in run_all.py, not in bench/)")
    if args.only:
        wanted = {n.strip() for n in args.only.split(",")}
        unknown = wanted - {b.name for b in benches}
        if unknown:
            parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        benches = [b for b in benches if b.name in wanted]
    if args.list:
        for bench in benches:
            print(f"{bench.name:<18} {' '.join(_shown(bench.command(args.quick)))}")
        return
    info, today = machine(), date.today().isoformat()
    outcomes = [run(bench, args.quick, args.timeout) for bench in benches]
    existing = HISTORY.read_text() if HISTORY.exists() else ""
    HISTORY.parent.mkdir(parents=True, exist_ok=True)
    HISTORY.write_text(regenerate(existing, outcomes, info, today, whole=not args.only))
    print(write_dashboard())
    failed = [o for o in outcomes if o.code != 0]
    for outcome in failed:
        print(f"\nFAILED {outcome.bench.name} (exit {outcome.code}):\n{outcome.output[-2000:]}")
    print(f"\nwrote {HISTORY.relative_to(ROOT)}: {len(outcomes) - len(failed)} of "
          f"{len(outcomes)} benchmarks updated" + (f"; missing: {', '.join(missing)}" if missing else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
