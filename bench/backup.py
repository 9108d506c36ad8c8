"""Backup and restore: wall time, file size and peak memory at a given instance size.

Real PostgreSQL (embedded, or DATABASE_URL), the real pg_dump/pg_restore the product picks.
The instance: `--memories` memories (384-d random unit vectors, ~90 characters each) over
ten people, `--documents` documents (~20 KB original, ~4 KB text, 5 embedded passages
each), both HNSW indexes built as the app builds them, and a small home (config, a skill,
sessions). A backup (`panager backup`'s code, secret-key encrypted) is made in a fresh
process, then restored (`panager restore`'s code) into a new empty database on the same
server in another fresh process, so each phase's peak memory is its own:

- "python": the process running backup or restore (ru_maxrss, includes the interpreter);
- "pg tool": the largest pg_dump/pg_restore it ran, measured by GNU time (`/usr/bin/time`)
  around the bundled tools (PANAGER_PG_DUMP points at a wrapper); "n/a" without GNU time.

    python bench/backup.py [--memories 5000] [--documents 100] [--without-hnsw]
                           [--record]   (appends to bench/results/backup.json)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import create_bench_database, machine_line, with_database  # noqa: E402
from bench.results import record  # noqa: E402

SECRET = "bench-secret-key-0123456789-abcdefghijklmnop"
DIM = 384
USERS = range(1, 11)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fill(url: str, memories: int, documents: int, hnsw: bool = True) -> float:
    """Fill the database; seconds spent (index builds included)."""
    from panager.services.memory.binding import INSERT_META, MEMORIES, PASSAGES

    started = time.perf_counter()
    rng = np.random.default_rng(7)
    with psycopg.connect(url, autocommit=True) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        for user in USERS:
            conn.execute("INSERT INTO users (id, username) VALUES (%s, %s)", (user, f"u{user}"))
        for table in (MEMORIES, PASSAGES):
            conn.execute(table.drop_index)
            conn.execute(table.retype(DIM))
        conn.execute(INSERT_META, ("local:all-minilm-l6-v2", DIM))
        with conn.cursor().copy(
            "COPY memories (user_id, content, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "text", "vector"])
            for i in range(memories):
                vector = rng.normal(size=DIM).astype(np.float32)
                vector /= np.linalg.norm(vector)
                text = f"memory {i}: the person mentioned detail number {i} about their week"
                copy.write_row((USERS[i % len(USERS)], text, vector))
        for d in range(documents):
            doc = uuid.uuid4()
            user = USERS[d % len(USERS)]
            text = (f"Document {d}. " + "A paragraph of ordinary prose. " * 130)[:4000]
            conn.execute(
                "INSERT INTO documents (id, user_id, name, mime, size, text, original) "
                "VALUES (%s, %s, %s, 'application/pdf', %s, %s, %s)",
                (doc, user, f"doc{d}.pdf", 20_000, text, rng.bytes(20_000)),
            )
            for seq in range(5):
                vector = rng.normal(size=DIM).astype(np.float32)
                vector /= np.linalg.norm(vector)
                conn.execute(
                    "INSERT INTO document_chunks (user_id, document_id, seq, content, embedding)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    (user, doc, seq, text[seq * 800:(seq + 1) * 800], vector),
                )
        for table in (MEMORIES, PASSAGES):
            if hnsw:
                conn.execute(table.create_index)
    return time.perf_counter() - started


def home_files(home: Path) -> None:
    (home / "skills" / "notes").mkdir(parents=True)
    (home / "skills" / "notes" / "SKILL.md").write_text("# Notes\nKeep them short.\n")
    (home / "sessions" / "1").mkdir(parents=True)
    for user in USERS:
        (home / "sessions" / f"{user}.jsonl").write_text('{"type": "session"}\n' * 200)
    (home / "config.yaml").write_text("max_iterations: 8\n")


def phase(args: argparse.Namespace) -> None:
    """Child process: run one phase and print its figures as JSON."""
    from panager.config import Settings
    from panager.services.backup.archive import make_backup
    from panager.services.backup.crypto import KeySource
    from panager.services.backup.restore import restore_backup

    settings = Settings(_env_file=None, database_url=args.url, home=Path(args.home),
                        secret_key=SECRET)
    started = time.perf_counter()
    key = KeySource(secret_key=SECRET)
    if args.phase == "backup":
        result = make_backup(settings, args.url, Path(args.file), key)
        extra = {"bytes": result.size, "rows": sum(result.tables.values())}
    else:
        done = asyncio.run(restore_backup(settings, args.url, Path(args.file), key))
        extra = {"rows": done.rows}
    seconds = time.perf_counter() - started
    print(json.dumps({
        "seconds": seconds,
        "python_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        **extra,
    }))


GNU_TIME = Path("/usr/bin/time")


def wrap_tools(work: Path) -> Path | None:
    """pg_dump and pg_restore wrappers that record their peak RSS (KiB) in work/rss-*.txt."""
    from panager.services.backup.pgtools import bundled_bin

    real = bundled_bin()
    if real is None or not GNU_TIME.exists():
        return None
    folder = work / "tools"
    folder.mkdir()
    for tool in ("pg_dump", "pg_restore"):
        wrapper = folder / tool
        wrapper.write_text(
            f'#!/bin/sh\nexec {GNU_TIME} -f "%M" -a -o {work}/rss-{tool}.txt {real / tool} "$@"\n'
        )
        wrapper.chmod(0o755)
    return folder / "pg_dump"


def peak_of(work: Path, tool: str) -> float | None:
    path = work / f"rss-{tool}.txt"
    if not path.exists():
        return None
    values = [int(x) for x in path.read_text().split() if x.isdigit()]
    return max(values) if values else None


def run_phase(name: str, url: str, home: Path, file: Path, dump: Path | None) -> dict:
    env = dict(os.environ)
    if dump is not None:
        env["PANAGER_PG_DUMP"] = str(dump)
    out = subprocess.run(
        [sys.executable, __file__, "--phase", name, "--url", url, "--home", str(home),
         "--file", str(file)],
        capture_output=True, text=True, check=False, env=env,
    )
    if out.returncode != 0:
        raise SystemExit(f"{name} failed: {out.stderr.strip().splitlines()[-1:]}")
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    tool = "pg_dump" if name == "backup" else "pg_restore"
    figures["tools_kib"] = peak_of(file.parent, tool)
    return figures


def main(args: argparse.Namespace) -> None:
    server, url = asyncio.run(create_bench_database(prefix="bench_backup"))
    target_name = f"bench_restore_{uuid.uuid4().hex[:12]}"
    work = Path(tempfile.mkdtemp(prefix="panager-bench-backup-"))
    try:
        log(f"filling {args.memories} memories and {args.documents} documents …")
        filled = fill(url, args.memories, args.documents, hnsw=not args.without_hnsw)
        log(f"filled in {filled:.1f}s")
        home_files(work / "home")
        dump = wrap_tools(work)
        backup = run_phase("backup", url, work / "home", work / "instance.pbak", dump)
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {target_name}")
        target = with_database(server, target_name)
        restore = run_phase("restore", target, work / "restored", work / "instance.pbak", dump)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            for name in (urlsplit(url).path.lstrip("/"), target_name):
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        shutil.rmtree(work, ignore_errors=True)
    assert restore["rows"] == backup["rows"]
    size = f"{args.memories:,} memories, {args.documents:,} documents" + (
        " (no HNSW indexes)" if args.without_hnsw else "")
    print(f"\n{machine_line()}")
    print(f"instance: {size}, {backup['rows']:,} rows\n")
    print("| phase | wall time (s) | file (MB) | peak RSS python (MiB) | peak RSS pg tool (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for name, figures in (("backup", backup), ("restore", restore)):
        mb = f"{backup['bytes'] / 1e6:.1f}" if name == "backup" else ""
        tools = figures["tools_kib"]
        shown = f"{tools / 1024:.0f}" if tools is not None else "n/a"
        print(f"| {name} | {figures['seconds']:.2f} | {mb} | {figures['python_kib'] / 1024:.0f} "
              f"| {shown} |")
    if args.record:
        tag = f"{args.memories}m_{args.documents}d" + ("_nohnsw" if args.without_hnsw else "")
        record("backup", figures_of(tag, backup, restore),
               metrics=metrics_of(tag, size), title="Backup and restore", history="Backup",
               note=f"bench/backup.py --memories {args.memories} --documents {args.documents}"
               + (" --without-hnsw" if args.without_hnsw else ""))


def figures_of(tag: str, backup: dict, restore: dict) -> dict[str, float]:
    """The dashboard's figures of one run at one size."""
    peaks = [f["python_kib"] for f in (backup, restore)]
    return {f"{tag}_backup_s": round(backup["seconds"], 2),
            f"{tag}_restore_s": round(restore["seconds"], 2),
            f"{tag}_file_mb": round(backup["bytes"] / 1e6, 1),
            f"{tag}_peak_mib": round(max(peaks) / 1024, 1)}


def metrics_of(tag: str, size: str) -> dict[str, dict[str, str]]:
    """The dashboard's rows for one size."""
    return {
        f"{tag}_backup_s": {"label": f"Backup of {size}: wall time", "unit": "s",
                            "better": "lower", "target": "", "compare": ""},
        f"{tag}_restore_s": {"label": f"Restore of {size}: wall time", "unit": "s",
                             "better": "lower", "target": "", "compare": ""},
        f"{tag}_file_mb": {"label": f"Backup of {size}: file size", "unit": "MB",
                           "better": "lower", "target": "", "compare": ""},
        f"{tag}_peak_mib": {"label": f"Backup or restore of {size}: peak memory (Python)",
                            "unit": "MiB", "better": "lower",
                            "target": "flat with size (one 1 MiB chunk each way)",
                            "compare": "pg_dump ~5 MiB, pg_restore ~3 MiB"},
    }

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=5_000)
    parser.add_argument("--documents", type=int, default=100)
    parser.add_argument(
        "--without-hnsw", action="store_true",
        help="no HNSW indexes (the restore then rebuilds none: data only; labelled so)",
    )
    parser.add_argument("--record", action="store_true",
                        help="append the figures to bench/results/backup.json (the dashboard)")
    parser.add_argument("--phase", choices=["backup", "restore"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.phase:
        phase(parsed)
    else:
        main(parsed)
