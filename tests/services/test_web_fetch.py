"""web_fetch against a local site, with the resolver and the dialer injected.

`public.test` resolves to a global address (93.184.215.14) that the test dialer
routes to the local site; `evil.test` resolves to 127.0.0.1. Every refusal is
checked twice: the tool result says why, and nothing was connected — the dialer
saw no attempt and the local site no request.
"""

from __future__ import annotations

import time
import tracemalloc
from types import SimpleNamespace
from urllib.parse import quote

import pytest

from panager.agent.tools.web import web_tools
from panager.config import RuntimeConfig
from panager.errors import ToolError
from panager.framing import holds_outside
from panager.services.web.fetch import WebFetcher
from panager.services.web.guard import AddressGuard, AllowList, WebError
from tests.fakes.web_server import (
    PUBLIC_IP,
    FakeDNS,
    FakeSite,
    RecordingDialer,
    gzip_bomb,
    tls_pair,
)
from tests.runtime_helpers import a_user

USER = a_user()


@pytest.fixture
async def site():
    async with FakeSite() as running:
        yield running


@pytest.fixture
def dns():
    return FakeDNS(
        {
            "public.test": [PUBLIC_IP],
            "evil.test": ["127.0.0.1"],
            "rebind.test": [[PUBLIC_IP], ["127.0.0.1"]],
        }
    )


@pytest.fixture
def dial(site):
    return RecordingDialer({PUBLIC_IP: site.port})


def fetch_tool(fetcher: WebFetcher, max_chars: int = 20_000):
    """The real web_fetch tool, built by its factory for one user."""
    deps = SimpleNamespace(
        web=fetcher, search=None, config=RuntimeConfig(max_tool_result_chars=max_chars)
    )
    (tool,) = web_tools(deps, USER)  # type: ignore[arg-type]
    return tool


def refused_cases(port: int) -> list[tuple[str, str]]:
    """(url, what the refusal must say) for every address web_fetch must not reach."""
    secret = f":{port}/secret"
    return [
        (f"http://127.0.0.1{secret}", "127.0.0.1 is a loopback address"),
        (f"http://[::1]{secret}", "::1 is a loopback address"),
        (f"http://10.0.0.1{secret}", "10.0.0.1 is a private network address"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        (f"http://0.0.0.0{secret}", "0.0.0.0 is the unspecified address"),
        (f"http://2130706433{secret}", "127.0.0.1 is a loopback address"),
        (f"http://0177.1{secret}", "127.0.0.1 is a loopback address"),
        (f"http://127.1{secret}", "127.0.0.1 is a loopback address"),
        (f"http://a@127.0.0.1{secret}", "user name or password"),
        (f"http://[::ffff:127.0.0.1]{secret}", "carrying 127.0.0.1, a loopback address"),
        (f"http://evil.test{secret}", "evil.test resolves to 127.0.0.1"),
    ]


async def test_refused_addresses_get_a_clear_result_and_no_connection(site, dns, dial):
    tool = fetch_tool(WebFetcher(AddressGuard(dns), dial=dial))
    for url, says in refused_cases(site.port):
        with pytest.raises(ToolError) as refused:
            await tool.ainvoke({"url": url})
        assert says in str(refused.value), url
        assert "web_fetch_allow" in str(refused.value) or "user name" in str(refused.value)
    assert dial.attempts == []  # no connection was even attempted
    assert site.requests == []


async def test_a_redirect_to_a_private_address_is_refused_before_connecting(site, dns, dial):
    tool = fetch_tool(WebFetcher(AddressGuard(dns), dial=dial))
    url = f"http://public.test:{site.port}/redirect?to=http://127.0.0.1:{site.port}/secret"
    with pytest.raises(ToolError) as refused:
        await tool.ainvoke({"url": url})
    assert "127.0.0.1 is a loopback address" in str(refused.value)
    assert holds_outside(str(refused.value))  # the redirect target came from the server
    assert site.paths() == ["/redirect"]  # the second hop never reached the site
    assert dial.attempts == [(PUBLIC_IP, site.port)]


async def test_every_hop_is_resolved_and_checked_again(site, dns, dial):
    fetcher = WebFetcher(AddressGuard(dns), dial=dial)
    url = f"http://rebind.test:{site.port}/redirect?to=/article"
    with pytest.raises(WebError, match=r"rebind\.test resolves to 127\.0\.0\.1"):
        await fetcher.fetch(url)
    assert dns.calls == ["rebind.test", "rebind.test"]
    assert site.paths() == ["/redirect"]


async def test_the_connection_goes_to_the_checked_address(site, dial):
    """A name answering a public address and then 127.0.0.1 is looked up once per hop, and
    the socket goes to the address that was checked, never to a second lookup's answer."""
    dns = FakeDNS({"rebind.test": [[PUBLIC_IP], ["127.0.0.1"], ["127.0.0.1"]]})
    fetcher = WebFetcher(AddressGuard(dns), dial=dial)
    page = await fetcher.fetch(f"http://rebind.test:{site.port}/article")
    assert "Sea otters hold hands" in page.text
    assert dns.calls == ["rebind.test"]
    assert dial.attempts == [(PUBLIC_IP, site.port)]
    assert site.requests == [("/article", f"rebind.test:{site.port}")]  # Host: the name
    with pytest.raises(WebError, match=r"resolves to 127\.0\.0\.1"):
        await fetcher.fetch(f"http://rebind.test:{site.port}/secret")
    assert "/secret" not in site.paths()


async def test_a_public_page_comes_back_as_framed_readable_text(site, dns, dial):
    tool = fetch_tool(WebFetcher(AddressGuard(dns), dial=dial))
    result = await tool.ainvoke({"url": f"http://public.test:{site.port}/article"})
    assert result.startswith('<outside_content source="web page http://public.test:')
    assert "Sea otters hold hands while they sleep" in result
    assert '"title":"Otter facts"' in result
    assert "Cookie settings" not in result and "Shop" not in result  # boilerplate left out


async def test_allow_list_reaches_a_local_page(site, dns):
    dial = RecordingDialer()
    guard = AddressGuard(dns, AllowList.parse(["127.0.0.1"]))
    tool = fetch_tool(WebFetcher(guard, dial=dial))
    result = await tool.ainvoke({"url": f"http://127.0.0.1:{site.port}/article"})
    assert "An otter's fur is the densest of any animal" in result
    assert dial.attempts == [("127.0.0.1", site.port)]
    with pytest.raises(ToolError, match="loopback"):  # other local spellings stay refused
        await tool.ainvoke({"url": f"http://[::1]:{site.port}/article"})


async def test_pdf_and_plain_text_are_read_and_other_types_refused(site, dns, dial):
    fetcher = WebFetcher(AddressGuard(dns), dial=dial)
    base = f"http://public.test:{site.port}"
    pdf = await fetcher.fetch(f"{base}/doc.pdf")
    assert pdf.kind == "pdf" and "Quarterly otter census" in pdf.text and "42" in pdf.text
    untyped = await fetcher.fetch(f"{base}/untyped-pdf")
    assert untyped.kind == "pdf" and "No content type here" in untyped.text
    plain = await fetcher.fetch(f"{base}/plain")
    assert plain.kind == "text" and plain.text == "just words, no markup"
    tool = fetch_tool(fetcher)
    with pytest.raises(ToolError) as refused:
        await tool.ainvoke({"url": f"{base}/image.png"})
    assert "image/png" in str(refused.value) and "HTML), PDF and plain text" in str(refused.value)
    with pytest.raises(ToolError, match="answered HTTP 404"):
        await tool.ainvoke({"url": f"{base}/missing"})


async def test_a_gzip_bomb_stops_at_the_cap(site, dns, dial):
    site.bomb = gzip_bomb(50_000_000)
    assert len(site.bomb) < 200_000
    fetcher = WebFetcher(AddressGuard(dns), dial=dial)
    tracemalloc.start()
    try:
        page = await fetcher.fetch(f"http://public.test:{site.port}/bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.truncated and page.size == 2_000_000
    assert page.text.startswith("all work and no play")
    assert peak < 16_000_000  # never near the 50 MB the body inflates to
    result = fetch_tool(fetcher, max_chars=3_000)
    text = await result.ainvoke({"url": f"http://public.test:{site.port}/bomb"})
    assert len(text) <= 3_000 and "Only the start of the document is shown" in text


async def test_redirects_are_followed_at_most_five_times(site, dns, dial):
    fetcher = WebFetcher(AddressGuard(dns), dial=dial)

    def chain(hops: int) -> str:
        target = "/article"
        for _ in range(hops):
            target = "/redirect?to=" + quote(target, safe="")
        return f"http://public.test:{site.port}{target}"

    assert "Sea otters" in (await fetcher.fetch(chain(5))).text
    with pytest.raises(WebError, match="redirected more than 5 times"):
        await fetcher.fetch(chain(6))


@pytest.mark.timing
async def test_one_deadline_covers_the_whole_fetch(site, dns, dial):
    fetcher = WebFetcher(AddressGuard(dns), dial=dial, deadline=0.3)
    started = time.perf_counter()
    with pytest.raises(WebError, match=r"took longer than 0.3 s"):
        await fetcher.fetch(f"http://public.test:{site.port}/slow")
    assert time.perf_counter() - started < 2


async def test_tls_verifies_the_name_and_sends_it_as_sni_while_dialing_the_checked_ip(dns):
    server_tls, client_tls, sni = tls_pair("public.test")
    async with FakeSite(tls=server_tls) as tls_site:
        dial = RecordingDialer({PUBLIC_IP: tls_site.tls_port})
        fetcher = WebFetcher(AddressGuard(dns), dial=dial, ssl_context=client_tls)
        page = await fetcher.fetch(f"https://public.test:{tls_site.tls_port}/article")
        assert "Sea otters" in page.text
        assert sni == ["public.test"] and dial.attempts == [(PUBLIC_IP, tls_site.tls_port)]
        other = FakeDNS({"other.test": [PUBLIC_IP]})  # same address, a name not on the cert
        wrong = WebFetcher(AddressGuard(other), dial=dial, ssl_context=client_tls)
        with pytest.raises(WebError, match="TLS certificate could not be verified"):
            await wrong.fetch(f"https://other.test:{tls_site.tls_port}/article")
        assert tls_site.paths() == ["/article"]


async def test_ipv6_literals_and_aaaa_answers_dial_the_checked_address(site):
    public6 = "2606:4700::1111"
    dns = FakeDNS({"v6.test": [public6]})
    dial = RecordingDialer({public6: site.port})
    fetcher = WebFetcher(AddressGuard(dns), dial=dial)
    for url in (f"http://[{public6}]:{site.port}/plain", f"http://v6.test:{site.port}/plain"):
        assert (await fetcher.fetch(url)).text == "just words, no markup"
    assert dial.attempts == [(public6, site.port)] * 2
    assert [host for _, host in site.requests] == [f"[{public6}]:{site.port}", f"v6.test:{site.port}"]
