"""Running a decode job in its own process (decode.py) with limits and a kill timeout.

The child is a parser facing hostile files, so it gets as little as it can use:

- a minimal environment (`PATH`, `LANG`, and `PYTHONPATH` pointing at Panager's own
  code) — none of the parent's secrets (`PANAGER_SECRET_KEY`, model and bot tokens,
  `DATABASE_URL`);
- no inherited descriptors besides its three pipes (`close_fds`);
- a private, empty working directory, removed after the job;
- where the kernel allows unprivileged user namespaces (`unshare --user --map-root-user
  --net --mount`), no network at all and an empty tmpfs over `PANAGER_HOME`, so the
  embedded database's socket, the config and the media files are out of its sight.

`isolation(home)` says which of these is active (`panager doctor` shows it). What remains:
the child runs as the same OS user (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
REAP_TIMEOUT = 5.0  # seconds to wait for a killed decoder's exit
DECODER = ("-m", "panager.services.media.decode")
# Inside the new namespaces: hide $1 (when it is a directory) under an empty tmpfs, then run
# the rest; exit 97 when the mount fails (the probe then reports namespaces as unavailable).
_HIDE = 'if [ -d "$1" ]; then mount -t tmpfs -o size=4k,mode=0700 none "$1" || exit 97; fi; ' \
        'unset PWD; shift; exec "$@"'


@dataclass(frozen=True)
class Limits:
    """What one decode may use: memory (bytes), CPU seconds and wall-clock seconds."""

    memory_bytes: int = 1024 * 1024 * 1024
    cpu_seconds: int = 20
    timeout: float = 30.0
    hidden: Path | None = None  # hidden from the child where namespaces allow (PANAGER_HOME)


@dataclass(frozen=True)
class Isolation:
    """How the decoder child is kept apart beyond its environment, descriptors and cwd."""

    namespaces: bool  # no network, own mount namespace
    hides: Path | None  # the directory the child cannot see (None: nothing hidden)
    detail: str

    def prefix(self) -> list[str]:
        """The command that puts the child into its namespaces (empty without them)."""
        if not self.namespaces:
            return []
        unshare = shutil.which("unshare") or "unshare"
        hidden = str(self.hides) if self.hides is not None else ""
        return [unshare, "--user", "--map-root-user", "--net", "--mount", "--",
                "sh", "-c", _HIDE, "sh", hidden]


def _own_code() -> Path:
    """The directory Panager's package is imported from."""
    return Path(__file__).resolve().parents[3]


@functools.lru_cache(maxsize=8)
def isolation(home: Path | None) -> Isolation:
    """Probe once per home whether unprivileged namespaces (and the tmpfs over `home`)
    work here; the child then runs inside them."""
    base = "minimal environment, no inherited descriptors, private empty working directory"
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return Isolation(False, None, f"{base}; no namespaces on this system")
    hides = home.resolve() if home is not None else None
    if hides is not None and any(
        p == hides or hides in p.parents for p in (Path(sys.prefix).resolve(), _own_code())
    ):
        hides = None  # Panager's own code lives under it: the child must see it
    try:
        probe = subprocess.run(
            [*Isolation(True, hides, "").prefix(), "true"], capture_output=True, timeout=10,
            env=child_env(), check=False,
        )
        usable = probe.returncode == 0
    except (OSError, subprocess.SubprocessError):
        usable = False
    if not usable:
        return Isolation(False, None, f"{base}; unprivileged user namespaces are not "
                                      "available, so the child has network access and sees "
                                      "PANAGER_HOME")
    seen = f"{hides} hidden" if hides is not None else "PANAGER_HOME not hidden"
    return Isolation(True, hides, f"{base}; no network, {seen} (user namespaces)")


def child_env() -> dict[str, str]:
    """The decoder child's whole environment: nothing of the parent's but PATH."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
            "PYTHONPATH": str(_own_code())}


@contextlib.asynccontextmanager
async def spawn(
    args: Sequence[str], limits: Limits
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Start `python args` as the isolated child (pipes on stdin, stdout, stderr) in a
    private empty directory, removed when the block ends."""
    where = isolation(limits.hidden)
    with tempfile.TemporaryDirectory(prefix="panager-decode-") as workdir:
        proc = await asyncio.create_subprocess_exec(
            *where.prefix(), sys.executable, *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=child_env(), cwd=workdir, close_fds=True,
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                try:  # a killed child is reaped at once; never let the turn wait on it long
                    await asyncio.wait_for(proc.wait(), REAP_TIMEOUT)
                except TimeoutError:
                    log.warning("decoder %s did not exit after kill", proc.pid)


class DecodeFailed(Exception):
    """The decoder refused the file or died; the message is one line for the person."""


async def run_job(job: dict, data: bytes, limits: Limits) -> tuple[dict, bytes]:
    """Run `job` over `data` in a limited subprocess; its result and payload bytes.

    Raises DecodeFailed with the decoder's line, or with a plain one when the process
    was killed (timeout, memory, CPU)."""
    header = {**job, "memory_bytes": limits.memory_bytes, "cpu_seconds": limits.cpu_seconds}
    async with spawn(DECODER, limits) as proc:
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(json.dumps(header).encode() + b"\n" + data), limits.timeout
            )
        except TimeoutError:
            raise DecodeFailed("reading it took too long, so it was stopped") from None
    return _parse(out, err, proc.returncode)


def _parse(out: bytes, err: bytes, code: int | None) -> tuple[dict, bytes]:
    line, _, payload = out.partition(b"\n")
    try:
        result = json.loads(line) if line else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        log.warning("decoder exited %s: %s", code, err.decode(errors="replace")[-300:])
        raise DecodeFailed("reading it needed more memory or time than is allowed")
    if result.get("error"):
        raise DecodeFailed(str(result["error"]))
    return result, payload[: int(result.get("payload_bytes", 0))]
