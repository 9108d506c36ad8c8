"""The reliability suite: real `panager run` processes, real PostgreSQL, local fakes.

Each test starts `panager run` as a child process (through the same launcher
as tests/cli/test_cli_run.py, which points discord.py at the FakeDiscord), talks
to it as Discord users, and breaks things from outside: SIGKILL, SIGTERM, a
PostgreSQL that stops, a model API that answers 500. Process logs go to a
file in the test's temp dir and are shown when a test fails.

Numbers a test wants reported (the load test's throughput and latency) go
through `report(...)`: they ride on the test's report (`user_properties`, so
they reach the main process from a pytest-xdist worker too), are printed in the
terminal summary (tests/conftest.py) and, when PANAGER_RELIABILITY_REPORT names
a file, written there as JSON (bench/run_all.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli_run import LAUNCHER
from tests.conftest import RELIABILITY_PROPERTY
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI

TOKEN = "reliability-token"
# PANAGER_PROFILE_DIR (bench/load.py --profile): each child runs under cProfile and writes
# <dir>/<pid>.prof when it exits; `close()` then stops it with SIGTERM so the file is written.
PROFILE_DIR = os.environ.get("PANAGER_PROFILE_DIR")
PROFILED_LAUNCHER = LAUNCHER.replace(
    "main()\n",
    "import atexit, cProfile\n"
    "_profile = cProfile.Profile()\n"
    "atexit.register(lambda: _profile.dump_stats("
    "os.path.join(os.environ['PANAGER_PROFILE_DIR'], f'{os.getpid()}.prof')))\n"
    "_profile.enable()\n"
    "main()\n",
)
START_TIMEOUT = 60.0
_PENDING: list[tuple[str, dict]] = []  # reported by the running test, not yet on its report


def report(title: str, numbers: dict) -> None:
    """Record numbers for the terminal summary (and the JSON report file)."""
    _PENDING.append((title, numbers))
    path = os.environ.get("PANAGER_RELIABILITY_REPORT")
    if path:
        existing = json.loads(Path(path).read_text()) if Path(path).exists() else {}
        existing[title] = numbers
        Path(path).write_text(json.dumps(existing, indent=2))


@pytest.fixture
async def openai():
    """The fake model API; the default answer echoes the user's last message."""
    async with FakeOpenAI() as server:
        server.handler = lambda body: f"answer to: {last_user_text(body)}"
        yield server


@pytest.fixture
async def discord():
    """The fake Discord (gateway + REST) the child processes connect to."""
    async with FakeDiscord(token=TOKEN) as server:
        yield server


def last_user_text(body: dict) -> str:
    """The text of the last user message of a chat-completions request."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def write_home(home: Path, **config) -> Path:
    """A PANAGER_HOME with a config.yaml holding `config`."""
    home.mkdir(parents=True, exist_ok=True)
    if config:
        (home / "config.yaml").write_text(yaml.safe_dump(config))
    return home


class PanagerRun:
    """One `panager run` child process (restartable) against the fakes."""

    def __init__(
        self,
        discord: FakeDiscord,
        openai: FakeOpenAI,
        *,
        database_url: str,
        home: Path,
        components: str = "discord,worker",
        **env: str,
    ) -> None:
        self.discord = discord
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PANAGER_"))}
        self.env.pop("DISCORD_TOKEN", None)
        self.env.update(
            DATABASE_URL=database_url,
            PANAGER_HOME=str(home),
            PANAGER_TIMEZONE="UTC",
            PANAGER_ACCESS="open",
            DISCORD_TOKEN=TOKEN,
            OPENAI_BASE_URL=openai.base_url,
            OPENAI_API_KEY="test",
            FAKE_DISCORD_REST=discord.rest_base,
            FAKE_DISCORD_GATEWAY=discord.gateway_url,
            **env,
        )
        if PROFILE_DIR:
            self.env["PANAGER_PROFILE_DIR"] = PROFILE_DIR
        self.components = components
        self.log_path = home / "panager-run.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self) -> None:
        """Start the process and wait until its bot has identified with the gateway."""
        identified = len(self.discord.identifies)
        self.starts += 1
        with self.log_path.open("a") as log:
            log.write(f"\n===== start {self.starts} =====\n")
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", PROFILED_LAUNCHER if PROFILE_DIR else LAUNCHER,
                "run", "--components", self.components,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        if "discord" not in self.components.split(","):  # no gateway: wait for the log line
            marker = f"===== start {self.starts} ====="
            while "panager is running" not in self.log().split(marker)[-1]:
                if self.proc.returncode is not None or loop.time() > deadline:
                    raise AssertionError(f"panager run did not start:\n{self.log()}")
                await asyncio.sleep(0.05)
            return
        while len(self.discord.identifies) <= identified:
            if self.proc.returncode is not None:
                raise AssertionError(f"panager run exited early:\n{self.log()}")
            if loop.time() > deadline:
                raise AssertionError(f"panager run did not connect:\n{self.log()}")
            await asyncio.sleep(0.05)
        await self.discord.wait_until_ready(timeout=START_TIMEOUT)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs at all."""
        assert self.proc is not None and self.proc.returncode is None
        os.kill(self.proc.pid, signal.SIGKILL)

    async def wait_dead(self) -> int:
        """Wait for the process to end; returns its exit code."""
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), 60)

    async def terminate(self, timeout: float = 60) -> int:
        """SIGTERM and wait for the graceful exit; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), timeout)

    def signal(self, sig: int) -> None:
        """Send `sig` (e.g. SIGSTOP/SIGCONT) to the process."""
        assert self.proc is not None and self.proc.returncode is None
        os.kill(self.proc.pid, sig)

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.returncode is None

    def log(self) -> str:
        """Everything the process wrote (all starts)."""
        return self.log_path.read_text() if self.log_path.exists() else ""

    async def close(self) -> None:
        """Make sure nothing is left running (profiled: stopped gracefully, profile written)."""
        if self.alive and PROFILE_DIR:
            with contextlib.suppress(TimeoutError):
                await self.terminate(timeout=60)
        if self.alive:
            self.proc.kill()
            await self.proc.wait()


@pytest.fixture
async def panager_run(discord, openai, request):
    """Factory: a PanagerRun (not started); killed after the test, log shown on failure."""
    made: list[PanagerRun] = []

    def make(**kw) -> PanagerRun:
        run = PanagerRun(discord, openai, **kw)
        made.append(run)
        return run

    yield make
    for run in made:
        await run.close()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for run in made:
            sys.stderr.write(f"\n----- {run.log_path} -----\n{run.log()[-20000:]}\n")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (the fixture above shows logs on failure); the
    numbers the test reported go on its call report."""
    if call.when == "call":
        item.user_properties.extend((RELIABILITY_PROPERTY, entry) for entry in _PENDING)
        _PENDING.clear()
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


async def eventually(condition, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll `condition()` (sync or async) until true, else fail naming `what`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


def texts_to(discord: FakeDiscord, user_id: int) -> list[str]:
    """What the bot has sent the user so far, in order."""
    return [m["content"] for m in discord.messages_to(user_id)]
