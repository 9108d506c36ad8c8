"""Run every benchmark and regenerate BENCHMARKS.md with the machine and the date.

    .venv/bin/python bench/run_all.py                   # everything (tens of minutes)
    .venv/bin/python bench/run_all.py --quick           # smaller sizes where a script has them
    .venv/bin/python bench/run_all.py --only scheduler,reliability
    .venv/bin/python bench/run_all.py --list            # what would run; what is missing

Each benchmark is a script in bench/ (plus the reliability load test, run
through pytest) and runs in its own process, one after the other, so they do
not compete for the machine. BENCHMARKS.md keeps one `## Section` per
benchmark: the prose written by hand stays as it is; the block between the
`<!-- run_all: NAME -->` markers (command, duration, the script's output) is
replaced by this run's. The header names the machine and the date.
Benchmarks that fail keep their previous block and are reported at the end
with the tail of their output; scripts listed below but absent are reported
as missing, and scripts in bench/ not listed here still run (section named
after the file).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OUTPUT = ROOT / "BENCHMARKS.md"
HELPERS = {
    "__init__.py", "chitchat.py", "common.py", "embed_cache.py", "memory_corpus.py",
    "memory_dialogues.py", "recall_cv.py", "run_all.py",
}
TIMEOUT = 3600.0
INTRO = "Each section: the command, the machine, the numbers."


@dataclass
class Benchmark:
    """One benchmark: its section title and how to run it."""

    name: str
    title: str
    args: list[str]
    quick: list[str] = field(default_factory=list)
    script: str | None = None  # bench/<script>; None for the pytest-driven one

    def command(self, quick: bool) -> list[str]:
        """The argv that runs it."""
        extra = self.quick if quick else []
        if self.script is None:
            return [sys.executable, "-m", "pytest", *self.args, *extra]
        return [sys.executable, f"bench/{self.script}", *self.args, *extra]


KNOWN = [
    Benchmark(
        "scheduler",
        "Scheduler",
        [],
        ["--reminders", "2000", "--users", "200", "--rounds", "1", "--fair-agent-runs", "100"],
        "scheduler.py",
    ),
    Benchmark("memory", "Memory", [], ["--quick"], "memory.py"),
    Benchmark("memory_recall", "Memory recall", [], ["--conversations", "2"], "memory_recall.py"),
    Benchmark("embedders", "Embedders", [], ["--repeat", "1"], "embedders.py"),
    Benchmark("turn_overhead", "Turn overhead", [], ["--turns", "60"], "turn_overhead.py"),
    Benchmark(
        "long_conversation", "Long conversation", [], ["--turns", "200"], "long_conversation.py"
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
    Benchmark(
        "reliability",
        "Reliability",
        ["-q", "-p", "no:cacheprovider", "tests/reliability/test_load.py"],
    ),
]


def discover() -> tuple[list[Benchmark], list[str]]:
    """The benchmarks to run (listed ones present + unlisted scripts) and missing scripts."""
    present = {p.name for p in BENCH.glob("*.py")} - HELPERS
    found = [b for b in KNOWN if b.script is None or b.script in present]
    missing = [b.script for b in KNOWN if b.script is not None and b.script not in present]
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
    report = None
    if bench.script is None:
        report = Path(tempfile.mkstemp(prefix="panager-reliability-", suffix=".json")[1])
        report.unlink()
        env["PANAGER_RELIABILITY_REPORT"] = str(report)
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
    if report is not None and report.exists():
        output = _report_table(json.loads(report.read_text())) + "\n\n" + output
        report.unlink()
    print(f"   {'ok' if code == 0 else f'FAILED ({code})'} in {seconds:.0f} s", flush=True)
    return Outcome(bench, command, seconds, code, output.strip())


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def _shown(command: list[str]) -> list[str]:
    return [".venv/bin/python" if part == sys.executable else part for part in command]


def _report_table(numbers: dict) -> str:
    lines = []
    for title, values in numbers.items():
        lines.append(f"{title}:")
        lines += [f"  {key:<20} {value}" for key, value in values.items()]
    return "\n".join(lines)


# ------------------------------------------------------------------------ BENCHMARKS.md


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
        f"# Benchmarks\n\n{INTRO}\n\n"
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


def main() -> None:
    """Run the benchmarks, then rewrite BENCHMARKS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated names (see --list)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--list", action="store_true", help="show the benchmarks and exit")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per benchmark")
    args = parser.parse_args()
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
    existing = OUTPUT.read_text() if OUTPUT.exists() else ""
    OUTPUT.write_text(regenerate(existing, outcomes, info, today, whole=not args.only))
    failed = [o for o in outcomes if o.code != 0]
    for outcome in failed:
        print(f"\nFAILED {outcome.bench.name} (exit {outcome.code}):\n{outcome.output[-2000:]}")
    print(f"\nwrote {OUTPUT.relative_to(ROOT)}: {len(outcomes) - len(failed)} of "
          f"{len(outcomes)} benchmarks updated" + (f"; missing: {', '.join(missing)}" if missing else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
