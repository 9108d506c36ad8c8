"""The MCP servers of this process: started once, shared by every permitted person.

One connection (one process, for stdio) per configured server serves everyone the
server's `users` permits — a server that keeps state keeps it across them (docs say
so). What a person is offered: each ready server they are permitted, each tool on its
allow-list whose schema could be repaired and whose pin matches what the server
lists now. Approvals live in PostgreSQL (`PinStore`) and are read before each turn,
so an approval from the CLI or the admin page of another process takes effect on
the next turn here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from panager.mcp_config import McpServerConfig
from panager.services.mcp.connection import Backoff, McpProblem, ServerConnection
from panager.services.mcp.listing import ListedTool
from panager.services.mcp.pins import Pin, PinStore
from panager.services.mcp.results import cap, result_text
from panager.services.mcp.schemas import (
    assign_names,
    cap_description,
    offered_schema,
    param_descriptions,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OfferedTool:
    """An MCP tool as one person is offered it."""

    server: str
    name: str  # what the model calls: mcp__<server>__<tool>, sanitised and unique
    tool: ListedTool
    read_only: bool  # the operator's `read_only: true` for the server
    reviewed: bool = True  # the operator approved this text (not only a first listing)

    @property
    def description(self) -> str:
        """The server's description, capped (framed by the tool factory)."""
        return cap_description(self.tool.description)


@dataclass(frozen=True)
class ToolText:
    """One tool's words as an approval shows them."""

    name: str
    description: str
    parameters: tuple[tuple[str, str], ...]  # (where, description)
    approved: bool  # already approved as listed


@dataclass(frozen=True)
class ServerStatus:
    """What doctor and the admin page show for one server (no env or header values)."""

    name: str
    transport: str
    target: str  # the command (without arguments) or the URL without its query
    state: str
    tools: int  # listed by the server
    offered: int  # offered (allow-listed, schema accepted, pin approved)
    awaiting_approval: tuple[str, ...]
    left_out: tuple[str, ...]  # "tool: why" for schemas that cannot be offered
    first_listing: tuple[str, ...]  # offered on a first-listing pin, never reviewed
    error: str | None
    users: str
    read_only: bool
    restarts: int
    stderr: tuple[str, ...]


class McpError(Exception):
    """An MCP call that produced no usable result. The message is Panager's own words,
    safe to show the model as is; `said` is the server's text, if any: outside content,
    framed like a result before the model sees it."""

    def __init__(self, message: str, said: str | None = None) -> None:
        super().__init__(message)
        self.said = said


class McpToolFailed(McpError):
    """The server ran the tool and reported an error (an `isError` result, in `said`)."""


class McpHub:
    """Every configured MCP server, its tools, pins and calls."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        pins: PinStore,
        *,
        home: Path,
        backoff: Backoff = Backoff(),
        ping_seconds: float = 30.0,
    ) -> None:
        self.pins = pins
        self.connections: dict[str, ServerConnection] = {
            name: ServerConnection(
                name, config, home=home, on_listed=self._listed,
                backoff=backoff, ping_seconds=ping_seconds,
            )
            for name, config in servers.items()
        }  # fmt: skip
        self._approved: dict[tuple[str, str], tuple[str, bool]] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._warned: set[tuple[str, str, str]] = set()

    async def start(self, wait: float = 5.0) -> None:
        """Start every server; wait up to `wait` seconds for their first attempts."""
        for connection in self.connections.values():
            connection.start()
        await asyncio.gather(*(c.wait_tried(wait) for c in self.connections.values()))
        await self.refresh()

    async def stop(self) -> None:
        """Stop every server."""
        await asyncio.gather(*(c.stop() for c in self.connections.values()))

    async def _listed(self, connection: ServerConnection) -> None:
        await self.pins.record(connection.name, connection.tools)
        self._names = assign_names(
            (name, tool.name) for name, c in self.connections.items() for tool in c.tools
        )
        await self.refresh()

    async def refresh(self) -> None:
        """Read the approvals (before each turn: another process may have approved)."""
        if self.connections:
            self._approved = await self.pins.approved()

    # -- what a person gets ---------------------------------------------------------------

    def offered(self, identities: frozenset[str], admin: bool) -> list[OfferedTool]:
        """The tools this person is offered now, in a stable order."""
        offers: list[OfferedTool] = []
        for name, connection in sorted(self.connections.items()):
            config = connection.config
            if connection.state != "ready" or not config.permits(identities, admin):
                continue
            for tool in connection.tools:
                if self._offerable(name, config, tool):
                    reviewed = self._approved[(name, tool.name)][1]
                    offers.append(OfferedTool(
                        name, self._names[(name, tool.name)], tool, config.read_only, reviewed
                    ))
        return offers

    def _offerable(self, server: str, config: McpServerConfig, tool: ListedTool) -> bool:
        if config.tools is not None and tool.name not in config.tools:
            return False
        if tool.schema is None or (server, tool.name) not in self._names:
            return False
        if self._hash(server, tool.name) == tool.hash:
            return True
        key = (server, tool.name, tool.hash)
        if key not in self._warned:
            self._warned.add(key)
            log.warning(
                "mcp server %s: tool %r is not approved as listed; hidden until "
                "`panager mcp approve %s`", server, tool.name[:64], server,
            )  # fmt: skip
        return False

    def _hash(self, server: str, tool: str) -> str | None:
        approved = self._approved.get((server, tool))
        return approved[0] if approved else None

    def review(self, server: str) -> list[ToolText]:
        """What approving `server` approves: each tool as the model would get it — its
        description and every parameter description, capped as offered, in full."""
        connection = self.connections[server]
        config = connection.config
        return [
            ToolText(t.name, cap_description(t.description),
                     tuple(param_descriptions(offered_schema(t.schema or {}))),
                     self._hash(server, t.name) == t.hash)
            for t in connection.tools
            if t.schema is not None and (config.tools is None or t.name in config.tools)
        ]

    async def call(self, offer: OfferedTool, arguments: dict[str, Any]) -> str:
        """Call an offered tool; the result as capped text. McpError when there is none."""
        connection = self.connections[offer.server]
        current = next((t for t in connection.tools if t.name == offer.tool.name), None)
        if current is None or current.hash != offer.tool.hash:
            raise McpError(
                f"{offer.name} changed on the server since this turn began; it needs the "
                "operator's approval again"
            )
        try:
            result = await connection.call(offer.tool.name, arguments)
        except McpProblem as exc:  # unavailable, timed out, refused by the server
            raise McpError(str(exc), said=exc.said) from None
        except Exception as exc:  # anything else the transport raised; may quote the server
            said = connection.redact(str(exc))[:300] or None
            failed = f"MCP server {offer.server}: {offer.name} failed ({type(exc).__name__})"
            raise McpError(failed, said=said) from None
        text = cap(result_text(result), connection.config.max_result_chars)
        if result.is_error:
            raise McpToolFailed("the tool reported an error", said=text)
        return text

    # -- operator ---------------------------------------------------------------------------

    async def approve(self, server: str, by: str) -> list[str]:
        """Approve `server`'s tools as last listed; the tools whose pin changed."""
        changed = await self.pins.approve(server, by)
        await self.refresh()
        return changed

    async def status(self) -> list[ServerStatus]:
        """Each server's state and tool counts."""
        pins = {(p.server, p.tool): p for p in await self.pins.pins(list(self.connections))}
        await self.refresh()
        return [self._status(name, c, pins) for name, c in sorted(self.connections.items())]

    def _status(
        self, name: str, connection: ServerConnection, pins: Mapping[tuple[str, str], Pin]
    ) -> ServerStatus:
        config = connection.config
        tools = connection.tools
        waiting = tuple(
            t.name for t in tools if self._hash(name, t.name) != t.hash
            and (config.tools is None or t.name in config.tools)
        )  # fmt: skip
        unreviewed = tuple(
            t.name for t in tools if self._offerable(name, config, t)
            and not self._approved[(name, t.name)][1]
        )  # fmt: skip
        return ServerStatus(
            name=name,
            transport=config.transport,
            target=_target(config),
            state=connection.state,
            tools=len(tools),
            offered=sum(1 for t in tools if self._offerable(name, config, t)),
            awaiting_approval=waiting,
            first_listing=unreviewed,
            left_out=tuple(f"{t.name}: {t.refused}" for t in tools if t.refused),
            error=connection.error,
            users=_users(config),
            read_only=config.read_only,
            restarts=connection.restarts,
            stderr=tuple(connection.recent_stderr),
        )

    def names(self) -> Iterable[str]:
        """Configured server names."""
        return sorted(self.connections)


def _target(config: McpServerConfig) -> str:
    if config.url is not None:
        return config.url.split("?", 1)[0]
    return str(config.command)


def _users(config: McpServerConfig) -> str:
    if isinstance(config.users, str):
        return config.users
    return ", ".join(sorted(config.users))
