"""docs/security.md's table of tools, classes and what each question shows matches the code:
every registered tool is in it once, its class is the one the tool declares, and "read when
asked" is said exactly of the tools whose question reads the object first."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from panager.agent.graph.tool import (
    ALWAYS_ASK_KEY,
    CLASSIFY_KEY,
    CONSEQUENTIAL,
    LOOKUP_KEY,
    ORDINARY,
)
from panager.agent.tools import build_tools
from panager.agent.tools.mcp import mcp_tool
from panager.agent.tools.offer import google_connect_tool, google_load_tool
from panager.agent.tools.search import search_tool
from panager.agent.tools.web import _search_tool
from tests.fakes.google_server import FakeGoogle
from tests.google_helpers import start_harness
from tests.runtime_helpers import write_config

pytestmark = pytest.mark.timeout(60)
DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
HEADER = "| tool | class | the question shows |"
MCP_ROW = "mcp__<server>__<tool>"


def table() -> dict[str, tuple[str, str]]:
    """tool name → (class cell, question cell), from the doc."""
    lines = DOC.read_text().split(HEADER, 1)[1].strip().splitlines()[1:]
    rows: dict[str, tuple[str, str]] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert len(cells) == 3, line
        for name in re.findall(r"`([^`]+)`", cells[0]):
            assert name not in rows, f"{name} is in the table twice"
            rows[name] = (cells[1], cells[2])
    return rows


async def registered(make_app, tmp_path) -> list:
    async with FakeGoogle() as fake:
        h = await start_harness(make_app, fake,
                                home=write_config(tmp_path / "h", allow_user_messages=True))
        user = await h.app.deps.users.ensure(111, "alice")
        tools = build_tools(h.app.deps, user)
        offer = SimpleNamespace(server="s", name=MCP_ROW, read_only=False, description="d",
                                reviewed=True,
                                tool=SimpleNamespace(name="t", schema={"type": "object",
                                                                      "properties": {}}))
        tools += [_search_tool(None), mcp_tool(None, offer), search_tool([]),
                  google_load_tool([], []), google_connect_tool(h.app.deps, user)]
        return tools


async def test_the_security_table_matches_the_registered_tools(make_app, tmp_path):
    rows = table()
    tools = await registered(make_app, tmp_path)
    names = {t.name for t in tools}
    assert names == set(rows), (names ^ set(rows))
    for made in tools:
        class_cell, shows = rows[made.name]
        meta = made.metadata or {}
        declared = meta.get(CLASSIFY_KEY)
        if declared == ORDINARY:
            assert class_cell.startswith("ordinary"), made.name
        elif declared == CONSEQUENTIAL:
            assert class_cell.startswith("consequential"), made.name
        else:
            assert callable(declared) and class_cell.startswith("by rule"), made.name
        reads = LOOKUP_KEY in meta or callable(meta.get(ALWAYS_ASK_KEY))
        assert reads == shows.startswith("read when asked"), made.name
        if shows == "—":  # no question is ever asked about it
            assert declared == ORDINARY, made.name
        else:
            assert len(shows) > 10, made.name
