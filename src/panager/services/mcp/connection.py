# Over 400 lines, kept whole: one MCP server's lifecycle (start, backoff, calls, redaction) is one
# state machine.
"""One MCP server: its process (or HTTP session), kept alive, called with a timeout.

A supervisor task owns the connection (the SDK's transports are task-scoped context
managers): it starts the server, initialises the session, lists the tools, and waits
until the connection breaks or the hub stops. A call that finds the connection
closed marks it broken; the supervisor starts it again after a backoff (doubling,
capped), so a dead server gives error results and comes back by itself. A ping
every `ping_seconds` notices a server that died while idle.

A stdio child gets the SDK's default environment (HOME, PATH, USER, …) plus its
declared `env` and nothing else of Panager's; it runs in a private directory outside
`PANAGER_HOME`. Its stderr goes through a pipe that Panager reads and logs with the
declared `env`/`headers` values redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from panager.mcp_config import McpServerConfig
from panager.services.mcp.listing import ListedTool, list_tools

if TYPE_CHECKING:  # the SDK (~1 s of imports) loads when a server is first started
    import mcp_types as types
    from mcp import ClientSession
    from mcp.shared.exceptions import MCPError

log = logging.getLogger(__name__)

State = Literal["starting", "ready", "restarting", "failed", "stopped"]
Streams = tuple[Any, Any]
MAX_STDERR_LINE = 500


class McpProblem(Exception):
    """Why a call has no result. The message is Panager's own words, safe to show as
    is; `said` is text the server chose (the error it sent), outside content that
    reaches the model only framed."""

    def __init__(self, message: str, said: str | None = None) -> None:
        super().__init__(message)
        self.said = said


class McpUnavailable(McpProblem):
    """The server cannot take calls now."""


class McpCallFailed(McpProblem):
    """A call did not produce a result (timeout, connection lost, refused by the server)."""


@dataclass(frozen=True)
class Backoff:
    """Restart delays: `first` seconds, doubling up to `cap`."""

    first: float = 1.0
    cap: float = 60.0

    def delay(self, attempt: int) -> float:
        """The wait before restart number `attempt` (0-based)."""
        return float(min(self.cap, self.first * 2 ** min(attempt, 30)))


class Redactor:
    """Replaces the declared secret values in text that leaves the process (logs, pages)."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secrets

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return text


class StderrPump:
    """A pipe for the child's stderr: each line logged (redacted) and the last few kept."""

    def __init__(self, name: str, redact: Redactor) -> None:
        self.name = name
        self.redact = redact
        self.recent: deque[str] = deque(maxlen=5)
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._thread = threading.Thread(
            target=self._pump, args=(read_fd,), daemon=True, name=f"mcp-{name}-stderr"
        )
        self._thread.start()

    def _pump(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "r", errors="replace") as reader:
            for raw in reader:
                line = self.redact(raw.rstrip())[:MAX_STDERR_LINE]
                if line.strip():
                    self.recent.append(line)
                    log.info("mcp server %s: %s", self.name, line)

    def close(self) -> None:
        """Close our end; the thread ends when the last child holding the pipe exits."""
        with contextlib.suppress(OSError):
            self.writer.close()


OnListed = Callable[["ServerConnection"], Awaitable[None]]


class ServerConnection:
    """A supervised connection to one configured server."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        home: Path,
        on_listed: OnListed,
        backoff: Backoff = Backoff(),
        ping_seconds: float = 30.0,
        start_timeout: float = 60.0,
    ) -> None:
        self.name = name
        self.config = config
        self.home = home
        self.on_listed = on_listed
        self.backoff = backoff
        self.ping_seconds = ping_seconds
        self.start_timeout = start_timeout
        self.redact = Redactor(config.secrets())
        self.state: State = "starting"
        self.error: str | None = None
        self.error_said = False  # `error` quotes what the server sent: outside content
        self.tools: list[ListedTool] = []
        self.restarts = 0
        self._attempt = 0
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._wake = asyncio.Event()  # list again now, or stop watching
        self._relisted = asyncio.Event()
        self._stop = asyncio.Event()
        self._tried = asyncio.Event()  # the first start attempt finished, either way
        self._task: asyncio.Task[None] | None = None
        self._stderr: StderrPump | None = None
        self._workdir: str | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the supervisor (returns at once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def wait_tried(self, seconds: float) -> None:
        """Wait until the first start attempt has finished (or `seconds` passed)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tried.wait(), seconds)

    async def wait_ready(self, seconds: float) -> bool:
        """Wait until the server takes calls (or `seconds` passed); whether it does."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), seconds)
        return self.state == "ready"

    async def stop(self) -> None:
        """Stop the server and the supervisor."""
        self._stop.set()
        self._broken.set()
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 10)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
            except Exception:
                log.exception("mcp server %s did not stop cleanly", self.name)
        self.state = "stopped"
        if self._stderr is not None:
            self._stderr.close()

    @property
    def recent_stderr(self) -> list[str]:
        """The child's last few stderr lines, redacted."""
        return list(self._stderr.recent) if self._stderr is not None else []

    async def _supervise(self) -> None:
        while not self._stop.is_set():
            try:
                await self._serve_once()
            except Exception as exc:
                self._fail(exc)
            finally:
                self._session = None
                self._ready.clear()
                self._tried.set()
            if self._stop.is_set():
                break
            delay = self.backoff.delay(self._attempt)
            self._attempt += 1
            self.state = "restarting"
            log.warning("mcp server %s: restarting in %.1f s", self.name, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            self.restarts += 1
            self.state = "starting"

    def _fail(self, exc: BaseException) -> None:
        detail = self.redact(_reason(exc))
        self.error, self.error_said = detail, _said_by_server(exc)
        self.state = "failed"
        log.warning("mcp server %s failed: %s", self.name, detail)

    async def _serve_once(self) -> None:
        from mcp import ClientSession

        self._broken.clear()
        self.error, self.error_said = None, False
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=self._on_message)
            )
            await asyncio.wait_for(session.initialize(), self.start_timeout)
            self.tools = await asyncio.wait_for(list_tools(session, self.name), self.start_timeout)
            await self.on_listed(self)  # pins stored before anyone is offered the tools
            self._session = session
            self._attempt = 0  # it came up: the next failure restarts after the first delay
            self.state = "ready"
            self._ready.set()
            self._tried.set()
            await self._watch(session)

    async def _watch(self, session: ClientSession) -> None:
        """Return when the connection breaks or the hub stops. Every `ping_seconds`, and
        when asked (`relist`), list the tools again: a liveness check that also catches a
        server changing its tools while it runs."""
        while not self._broken.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.ping_seconds)
            self._wake.clear()
            if self._broken.is_set():
                break
            try:
                tools = await asyncio.wait_for(list_tools(session, self.name), self.ping_seconds)
            except Exception as exc:
                self._fail(exc)
                return
            if [t.hash for t in tools] != [t.hash for t in self.tools]:
                self.tools = tools
                await self.on_listed(self)
            self._relisted.set()
        if not self._stop.is_set() and self.error is None:
            self.error, self.error_said = "the connection was lost", False

    async def relist(self) -> None:
        """List the tools again now (e.g. after the server said they changed)."""
        self._relisted.clear()
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._relisted.wait(), self.start_timeout)

    async def _on_message(self, message: Any) -> None:
        """The server says its tool list changed: list it again."""
        import mcp_types as types

        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            self._wake.set()

    def _transport(self) -> AbstractAsyncContextManager[Streams]:
        if self.config.url is not None:
            return self._http()
        return self._stdio()

    @contextlib.asynccontextmanager
    async def _stdio(self) -> AsyncIterator[Streams]:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert self.config.command is not None  # config: command or url
        if self._stderr is None:
            self._stderr = StderrPump(self.name, self.redact)
        params = StdioServerParameters(
            command=self.config.command,
            args=list(self.config.args),
            env=dict(self.config.env),
            cwd=self._working_directory(),
        )
        async with stdio_client(params, errlog=self._stderr.writer) as streams:
            yield streams

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[Streams]:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert self.config.url is not None
        timeout = httpx2.Timeout(30.0, read=max(300.0, self.config.timeout_seconds))
        async with (
            httpx2.AsyncClient(headers=dict(self.config.headers), timeout=timeout) as client,
            streamable_http_client(self.config.url, http_client=client) as streams,
        ):
            yield streams[0], streams[1]

    def _working_directory(self) -> str:
        """The configured `cwd`, or a private directory outside PANAGER_HOME."""
        home = self.home.resolve()
        if self.config.cwd is not None:
            chosen = Path(self.config.cwd).expanduser().resolve()
            if chosen == home or home in chosen.parents:
                raise McpUnavailable(
                    f"cwd {chosen} is inside PANAGER_HOME; choose a directory outside it"
                )
            return str(chosen)
        if self._workdir is None:
            self._workdir = tempfile.mkdtemp(prefix=f"panager-mcp-{self.name}-")
        return self._workdir

    # -- calls -----------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call `tool`; McpUnavailable / McpCallFailed say why not (`McpProblem`)."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        session = await self._ready_session()
        timeout = self.config.timeout_seconds
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=arguments)
        )
        try:
            return await asyncio.wait_for(
                session.send_request(
                    request, types.CallToolResult, request_read_timeout_seconds=timeout
                ),
                timeout + 1,
            )
        except (TimeoutError, MCPError) as exc:
            raise self._call_error(tool, exc) from None
        except ValidationError:
            raise McpCallFailed(
                f"MCP server {self.name} answered {tool} with a malformed result"
            ) from None

    def _call_error(self, tool: str, exc: TimeoutError | MCPError) -> McpCallFailed:
        import mcp_types as types

        if isinstance(exc, TimeoutError) or exc.code == types.REQUEST_TIMEOUT:
            return McpCallFailed(
                f"MCP server {self.name}: {tool} did not answer within "
                f"{self.config.timeout_seconds:g} s"
            )
        if exc.code == types.CONNECTION_CLOSED:
            # Not ready from now on: a `wait_ready` after this waits for the restarted
            # process instead of answering from the dead one's state.
            self._ready.clear()
            self.state = "restarting"
            self._broken.set()
            self._wake.set()
            return McpCallFailed(
                f"MCP server {self.name} stopped during the call to {tool}; it is being "
                "restarted — try again in a moment"
            )
        said = self.redact(str(exc.message))[:300]  # the server's words, not Panager's
        return McpCallFailed(f"MCP server {self.name} refused the call to {tool}", said=said)

    async def _ready_session(self) -> ClientSession:
        if self.state == "starting" and not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), self.config.timeout_seconds)
        session = self._session
        if session is None or self._broken.is_set():
            raise self._unavailable()
        return session

    def _unavailable(self) -> McpUnavailable:
        """Not available now, with why: in Panager's words, or the server's (kept apart)."""
        error, said = self.error, self.error_said
        if error and said:
            return McpUnavailable(f"MCP server {self.name} is not available now", said=error)
        why = f" ({error})" if error else ""
        return McpUnavailable(f"MCP server {self.name} is not available now{why}")


# Failures described in Panager's own words (or the operator's: a command not found);
# anything else may quote what the server sent (a JSON-RPC error, a malformed listing,
# an HTTP reason phrase) and counts as the server's text.
OWN_FAILURES: tuple[type[BaseException], ...] = (TimeoutError, OSError, McpUnavailable)


def _own_failures() -> tuple[type[BaseException], ...]:
    """OWN_FAILURES and the HTTP client's connect and timeout errors (once it is loaded: an
    error it raised means it is)."""
    httpx2 = sys.modules.get("httpx2")
    if httpx2 is None:
        return OWN_FAILURES
    return (*OWN_FAILURES, httpx2.ConnectError, httpx2.TimeoutException)


def _first(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _said_by_server(exc: BaseException) -> bool:
    """Whether `_reason(exc)` may hold text the server chose."""
    return not isinstance(_first(exc), _own_failures())


def _reason(exc: BaseException) -> str:
    """One line on why a start failed (exception groups unwrapped)."""
    exc = _first(exc)
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename}"
    if isinstance(exc, McpUnavailable):
        return str(exc)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300]
