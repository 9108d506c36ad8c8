"""A server's tool listing, read leniently and checked once per listing.

The SDK validates a listing strictly: one tool whose schema lacks a top-level
`type` makes the whole `tools/list` fail, and with it every other tool of that
server. Servers built on other SDKs do send such schemas, so when the strict
reading fails the listing is read again raw and each tool is taken on its own;
what the model API would refuse is repaired or left out here, with one log line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from panager.services.mcp.schemas import SchemaRefused, repair_schema, tool_hash

if TYPE_CHECKING:  # the SDK loads on first use (services/mcp/connection.py)
    from mcp import ClientSession

log = logging.getLogger(__name__)
MAX_TOOLS = 500
MAX_PAGES = 20


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server lists it, with what the model would be given."""

    name: str
    description: str
    raw_schema: Any
    schema: dict[str, Any] | None  # repaired; None when it cannot be offered
    refused: str | None  # why it cannot be offered
    hash: str  # pins name + description + schema as the server sent them
    read_only_hint: bool  # the server's own claim; never trusted for classification


def listed_tool(raw: dict[str, Any], server: str) -> ListedTool | None:
    """A ListedTool from one raw listing entry (None when it has no usable name)."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        log.warning("mcp server %s: a tool without a name was left out", server)
        return None
    description = raw.get("description")
    description = description if isinstance(description, str) else ""
    schema_in = raw.get("inputSchema", raw.get("input_schema"))
    try:
        schema, refused = repair_schema(schema_in), None
    except SchemaRefused as exc:
        schema, refused = None, str(exc)
        log.warning("mcp server %s: tool %r left out: %s", server, name[:64], refused)
    annotations = raw.get("annotations") or {}
    hint = bool(isinstance(annotations, dict) and annotations.get("readOnlyHint"))
    return ListedTool(
        name=name,
        description=description,
        raw_schema=schema_in,
        schema=schema,
        refused=refused,
        hash=tool_hash(name, description, schema_in),
        read_only_hint=hint,
    )


async def list_tools(session: ClientSession, server: str) -> list[ListedTool]:
    """Every tool the server lists (all pages, at most MAX_TOOLS)."""
    raw_tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await _page(session, cursor)
        raw_tools.extend(t for t in page.get("tools", []) if isinstance(t, dict))
        cursor = page.get("nextCursor")
        if not cursor or len(raw_tools) >= MAX_TOOLS:
            break
    tools = [t for t in (listed_tool(raw, server) for raw in raw_tools[:MAX_TOOLS]) if t]
    return list({t.name: t for t in tools}.values())  # a repeated name: the last one


async def _page(session: ClientSession, cursor: str | None) -> dict[str, Any]:
    import mcp_types as types

    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
    try:
        result = await session.list_tools(params=params)
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    except ValidationError:
        # Read it raw (the SDK has no public lenient call): checked per tool above.
        raw = await session._dispatcher.send_raw_request(
            "tools/list", {"cursor": cursor} if cursor else None, {}
        )
        return raw if isinstance(raw, dict) else {}
