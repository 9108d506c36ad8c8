"""Tools that cannot work are not offered, and the fixed prompt (system prompt + tool schemas)
fits in a quarter of a 4,000-token window: without a Google client, with Google not linked
(one `google_connect` instead of eight schemas) and with it linked (`google_load`); a small
window offers a compact core, the rest behind `tool_search` and still reachable."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from panager.agent.flows.connect import CONNECTED_RESULT
from panager.agent.graph.tool import ORDINARY, tool
from panager.agent.tools.mcp import SOURCE_KEY
from panager.agent.tools.offer import GOOGLE_CONNECT, GOOGLE_LOAD, GOOGLE_TOOL_NAMES, compact_core
from panager.agent.tools.search import DEFERRED_KEY, TOOL_SEARCH, search_tool
from tests.fakes.google_server import FakeGoogle
from tests.fakes.scripted_model import ScriptedChatModel, call
from tests.google_helpers import ALICE, start_harness
from tests.runtime_helpers import write_config

pytestmark = pytest.mark.timeout(60)
WINDOW = 4_000


@pytest.fixture(autouse=True)
def _plain_http_oauth(monkeypatch):
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")


@pytest.fixture
async def fake():
    async with FakeGoogle() as server:
        yield server


class Offered:
    """Script steps that note, for every request, the tool names bound and the fixed prompt."""

    def __init__(self) -> None:
        self.model = ScriptedChatModel()
        self.names: list[set[str]] = []
        self.fixed: list[int] = []

    def step(self, reply):
        def run(messages):
            tools = self.model.bound_tools
            self.names.append({t["function"]["name"] for t in tools})
            system = [m for m in messages if isinstance(m, SystemMessage)]
            schemas = sum(len(json.dumps(t, ensure_ascii=False)) // 4 for t in tools)
            self.fixed.append(count_tokens_approximately(system) + schemas)
            return reply

        return run

    def add(self, *replies) -> None:
        self.model.add(*(self.step(r) for r in replies))


def small(tmp_path):
    return write_config(tmp_path / "h", context_window=WINDOW)


# The fixed prompt's share of a 4k window: a small window offers a compact core, the web,
# document and profile tools (and deleting memories or schedules) behind tool_search.
FIXED_SHARE = 0.25
DEFERRED = {"document_search", "document_list", "document_forget", "web_fetch",
            "profile_update", "schedule_cancel", "memory_forget"}


async def test_no_google_tool_is_offered_without_a_google_client(make_app, tmp_path):
    offered = Offered()
    offered.add("ok")
    app = await make_app(model=offered.model, home=small(tmp_path))
    assert app.deps.google is None
    user = await app.local_user()
    assert (await app.assistant.run_turn(user, "what can you do?")).ok
    names = offered.names[0]
    assert names and not names & (GOOGLE_TOOL_NAMES | {GOOGLE_CONNECT, GOOGLE_LOAD})
    assert {"memory_save", "schedule_create", "set_timezone"} <= names
    assert offered.fixed[0] <= FIXED_SHARE * WINDOW, offered.fixed[0]


async def test_unlinked_person_gets_google_connect_and_the_request_finishes_after_linking(
    make_app, fake, tmp_path
):
    fake.add_event(ALICE, summary="Dentist", start="2026-11-23T09:00:00Z",
                   end="2026-11-23T10:00:00Z")
    offered = Offered()
    offered.add(call(GOOGLE_CONNECT), call("calendar_list_events"), "Dentist on Monday.")
    h = await start_harness(make_app, fake, offered.model, home=small(tmp_path))
    user = await h.app.local_user()
    result = await h.app.assistant.run_turn(user, "what's on my calendar?")
    assert result.link and "Connect it here" in result.text
    assert GOOGLE_CONNECT in offered.names[0] and not offered.names[0] & GOOGLE_TOOL_NAMES
    assert offered.fixed[0] <= FIXED_SHARE * WINDOW, offered.fixed[0]

    assert (await h.follow(await h.authorize(result.link["url"], account=ALICE)))[0] == 200
    (_, text, _), = await h.recorder.wait()
    assert text.endswith("Dentist on Monday.")
    assert GOOGLE_LOAD in offered.names[1]  # linked now; a 4k window: the eight on request
    snapshot = await h.app.assistant.graph.aget_state(h.app.assistant.config_for(user))
    results = [m for m in snapshot.values["messages"] if isinstance(m, ToolMessage)]
    assert results[0].name == GOOGLE_CONNECT and results[0].content == CONNECTED_RESULT
    assert results[1].name == "calendar_list_events" and "Dentist" in results[1].content


async def test_linked_at_a_small_window_google_tools_come_with_google_load(
    make_app, fake, tmp_path
):
    offered = Offered()
    offered.add(call(GOOGLE_LOAD), call("task_list"), "No open tasks.")
    h = await start_harness(make_app, fake, offered.model, home=small(tmp_path))
    user = await h.app.local_user()
    await h.link(user)
    result = await h.app.assistant.run_turn(user, "my tasks?")
    assert result.ok and result.text == "No open tasks."
    first, second, _ = offered.names
    assert GOOGLE_LOAD in first and not first & GOOGLE_TOOL_NAMES
    assert offered.fixed[0] <= FIXED_SHARE * WINDOW, offered.fixed[0]
    assert second >= GOOGLE_TOOL_NAMES  # loaded for the rest of the turn


async def test_linked_at_a_larger_window_all_google_tools_are_offered(make_app, fake, tmp_path):
    offered = Offered()
    offered.add("ok")
    home = write_config(tmp_path / "h", context_window=16_000)
    h = await start_harness(make_app, fake, offered.model, home=home)
    user = await h.app.local_user()
    await h.link(user)
    assert (await h.app.assistant.run_turn(user, "hi")).ok
    assert offered.names[0] >= GOOGLE_TOOL_NAMES and GOOGLE_LOAD not in offered.names[0]


async def test_a_small_window_defers_rare_tools_behind_tool_search_and_all_stay_reachable(
    make_app, tmp_path
):
    offered = Offered()
    offered.add(
        call(TOOL_SEARCH, {"query": "documents"}),
        call("profile_update", {"section": "about", "text": "Runs a bakery."}),  # by name
        call("document_list"),  # outside content: last, so nothing after it asks first
        "Done.",
    )
    app = await make_app(model=offered.model, home=small(tmp_path))
    user = await app.local_user()
    assert (await app.assistant.run_turn(user, "what documents did I send?")).ok
    first, second, third, _ = offered.names
    assert TOOL_SEARCH in first and not first & DEFERRED
    assert {"memory_save", "memory_search", "memory_update", "schedule_create"} <= first
    assert {"document_search", "document_list", "document_forget"} <= second  # loaded
    assert "profile_update" not in second | third  # never loaded, still run when called
    snapshot = await app.assistant.graph.aget_state(app.assistant.config_for(user))
    found = [m for m in snapshot.values["messages"] if isinstance(m, ToolMessage)]
    loaded = json.loads(found[0].content)
    assert set(loaded["loaded"]) >= {"document_search", "document_list", "document_forget"}
    assert found[1].status != "error" and found[2].status != "error"
    assert (await app.deps.profiles.get(user.id)).sections["about"] == "Runs a bakery."


async def test_a_normal_window_offers_every_tool_without_tool_search(make_app, tmp_path):
    offered = Offered()
    offered.add("ok")
    app = await make_app(model=offered.model, home=write_config(tmp_path / "h"))
    user = await app.local_user()
    assert (await app.assistant.run_turn(user, "hi")).ok
    assert offered.names[0] >= DEFERRED and TOOL_SEARCH not in offered.names[0]


def _mcp(name: str) -> object:
    @tool(classify=ORDINARY)
    async def echo(text: str) -> str:
        """Echo the text back, as an MCP server tool would, with a long description that a
        small window cannot carry for every one of many such tools."""
        return text

    echo.name = name
    echo.metadata = {**(echo.metadata or {}), SOURCE_KEY: "MCP server t"}
    return echo


def test_mcp_tools_and_their_own_search_merge_into_the_small_window_search():
    eager = [_mcp(f"mcp__t__echo{i}") for i in range(12)]
    searched = [_mcp(f"mcp__u__echo{i}") for i in range(3)]
    mcp_search = search_tool(searched)
    mcp_search.metadata = {**(mcp_search.metadata or {}), SOURCE_KEY: "MCP servers, on demand"}
    offered, unlisted = compact_core([*eager, mcp_search], [], WINDOW)
    assert [t.name for t in offered] == [TOOL_SEARCH]
    deferred = {t.name for t in offered[0].metadata[DEFERRED_KEY]}
    assert deferred == {t.name for t in (*eager, *searched)} == {t.name for t in unlisted}
    assert "MCP server tools" in offered[0].description
    roomy, none = compact_core([*eager, mcp_search], [], 64_000)
    assert roomy[-1] is mcp_search and not none  # a large window: unchanged
