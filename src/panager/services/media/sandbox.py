"""Running a decode job in its own process (decode.py) with limits and a kill timeout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from dataclasses import dataclass

log = logging.getLogger(__name__)
REAP_TIMEOUT = 5.0  # seconds to wait for a killed decoder's exit


@dataclass(frozen=True)
class Limits:
    """What one decode may use: memory (bytes), CPU seconds and wall-clock seconds."""

    memory_bytes: int = 1024 * 1024 * 1024
    cpu_seconds: int = 20
    timeout: float = 30.0


class DecodeFailed(Exception):
    """The decoder refused the file or died; the message is one line for the person."""


async def run_job(job: dict, data: bytes, limits: Limits) -> tuple[dict, bytes]:
    """Run `job` over `data` in a limited subprocess; its result and payload bytes.

    Raises DecodeFailed with the decoder's line, or with a plain one when the process
    was killed (timeout, memory, CPU)."""
    header = {**job, "memory_bytes": limits.memory_bytes, "cpu_seconds": limits.cpu_seconds}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "panager.services.media.decode",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(json.dumps(header).encode() + b"\n" + data), limits.timeout
        )
    except TimeoutError:
        raise DecodeFailed("reading it took too long, so it was stopped") from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            try:  # a killed child is reaped at once; never let the turn wait on it for long
                await asyncio.wait_for(proc.wait(), REAP_TIMEOUT)
            except TimeoutError:
                log.warning("decoder %s did not exit after kill", proc.pid)
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
