"""RFC 6764 discovery from an address (anna@example.org): the SRV and TXT records come from a
real DNS server on a loopback UDP port (tests/fakes/dns_server.py); the server they name
is judged by the address guard and the password rule like any href."""

from __future__ import annotations

import pytest
from aiohttp import web

from panager.clock import FakeClock
from panager.db.pool import open_pool
from panager.providers.caldav.dav import CalDav
from panager.providers.caldav.discovery import address_domain, starting_points
from panager.providers.caldav.door import CalDavError, Door, peer_fingerprint
from panager.providers.caldav.provider import CalDavProvider
from panager.services.accounts.connections import Connections
from panager.services.accounts.provider import ProviderError
from panager.services.accounts.sealing import Sealer
from panager.services.web.guard import AddressGuard, AllowList, Refused
from tests.fakes.dns_server import DnsServer
from tests.fakes.web_server import PUBLIC_IP, FakeDNS, RecordingDialer, tls_pair
from tests.providers.test_caldav_door import LOGIN, ScriptedDav, principal_answer

pytestmark = pytest.mark.timeout(60)
SRV = "_caldavs._tcp.example.org"
PLAIN_SRV = "_caldav._tcp.example.org"


def test_what_counts_as_an_address() -> None:
    assert address_domain("Anna@Example.org") == "example.org"
    assert address_domain("example.org") == "example.org"
    for url in ("https://example.org/", "example.org/dav/", "127.0.0.1", "localhost", ""):
        assert address_domain(url) is None, url


async def test_an_address_finds_a_loopback_radicale_by_srv_only_where_allowed(
    db_url, caldav_servers
) -> None:
    radicale = caldav_servers["radicale"]
    user = radicale.new_user("srv")
    radicale.make_calendar(user, "srv-home", "Home")
    pool = await open_pool(db_url, max_size=2)
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (1, 'anna')")
    names = FakeDNS({"dav.example.org": ["127.0.0.1"]})  # the SRV target's A record
    typed = {"url": "anna@example.org", "username": user, "password": radicale.users[user]}
    with DnsServer({(PLAIN_SRV, "SRV"): [f"0 1 {radicale.port} dav.example.org."],
                    (PLAIN_SRV, "TXT"): ['"path=/"']}) as dns:
        try:
            clock = FakeClock()
            connections = Connections(pool, clock, Sealer("test-secret-key-for-caldav"))

            def caldav(allow: list[str]) -> CalDavProvider:
                return CalDavProvider(pool, connections, AddressGuard(names, AllowList.parse(
                    allow)), clock=clock, dns=dns.settings())

            before = len(radicale.requests)
            with pytest.raises(ProviderError) as refused:  # loopback, not allowed: refused
                await caldav([]).add(1, typed)
            assert str(refused.value).startswith(
                f"{PLAIN_SRV} names dav.example.org as the calendar server: Refused")
            assert "loopback" in str(refused.value)
            assert radicale.requests[before:] == []  # nothing was sent to it

            key, said = await caldav(["127.0.0.1"]).add(1, typed)
            assert said == "connected: 1 calendar"
            [stored] = await caldav(["127.0.0.1"]).stored(1)
            assert stored.url == f"http://dav.example.org:{radicale.port}/"
            assert stored.label == f"{user} @ dav.example.org"
            opened = await caldav(["127.0.0.1"]).open_calendar(1, key)
            assert [c.name for c in await opened.calendars()] == ["Home"]
            # https first, then plain http; the TXT path of the record that answered
            assert dns.queries[:3] == [(SRV, "SRV"), (PLAIN_SRV, "SRV"), (PLAIN_SRV, "TXT")]

            # the record names a server that is no CalDAV server: the domain's https next
            dialer = RecordingDialer()  # example.org's address leads nowhere
            names.table["example.org"] = [PUBLIC_IP]
            async with ScriptedDav() as empty:
                dns.records[(PLAIN_SRV, "SRV")] = [f"0 1 {empty.port} dav.example.org."]
                caldav_dialing = CalDavProvider(
                    pool, connections, AddressGuard(names, AllowList.parse(["127.0.0.1"])),
                    clock=clock, dns=dns.settings(), dial=dialer)
                with pytest.raises(ProviderError) as fell_back:
                    await caldav_dialing.check(1, typed)
            assert [path for _, path, _ in empty.seen] == ["/.well-known/caldav", "/"]
            assert (PUBLIC_IP, 443) in dialer.attempts
            assert str(fell_back.value) == (
                "The calendar server at https://example.org could not be reached.")
        finally:
            await pool.close()


async def test_an_srv_target_at_cloud_metadata_is_refused_before_connecting() -> None:
    guard = AddressGuard(FakeDNS({"meta.example.org": ["169.254.169.254"]}))
    for target in ("169.254.169.254.", "meta.example.org."):
        records = {(SRV, "SRV"): [f"0 1 80 {target}"]}
        with DnsServer(records) as dns, pytest.raises(Refused) as refused:
            await starting_points("anna@example.org", guard, dns.settings())
        assert "link-local" in str(refused.value), target
        assert str(refused.value).startswith(f"{SRV} names "), target


async def test_an_srv_target_on_another_domain_is_not_contacted() -> None:
    guard = AddressGuard(FakeDNS({"caldav.hoster.net": [PUBLIC_IP]}))
    records = {(SRV, "SRV"): ["0 1 443 caldav.hoster.net."], (SRV, "TXT"): ['"path=/dav/"']}
    with DnsServer(records) as dns, pytest.raises(CalDavError) as refused:
        await starting_points("anna@example.org", guard, dns.settings())
    assert str(refused.value) == (
        f"{SRV} names caldav.hoster.net, which is not under example.org; Panager does not "
        "send your password to another domain on the word of DNS alone. If that is your "
        "provider's server, enter https://caldav.hoster.net/ as the server address."
    )
    # under the same registrable domain: the record's server first, the domain's next
    guard = AddressGuard(FakeDNS({"p07-caldav.example.org": [PUBLIC_IP]}))
    with DnsServer({(SRV, "SRV"): ["10 1 443 backup.example.org.", "0 5 8443 p07-caldav."
                                   "example.org."],
                    (SRV, "TXT"): ['"txtvers=1" "path=/dav/"']}) as dns:
        points = await starting_points("anna@example.org", guard, dns.settings())
    assert points == [("https://p07-caldav.example.org:8443/dav/", SRV),
                      ("https://example.org/", None)]


async def test_no_srv_record_falls_back_to_the_domains_well_known_address() -> None:
    server_tls, _client, _names = tls_pair("example.org")
    async with ScriptedDav(tls=server_tls) as server:
        server.routes["/.well-known/caldav"] = web.Response(
            status=301, headers={"Location": "/dav/"})
        server.routes["/dav/"] = principal_answer("/dav/anna/")
        guard = AddressGuard(FakeDNS({"example.org": ["127.0.0.1"]}),
                             AllowList.parse(["127.0.0.1"]))
        with DnsServer({("example.org", "A"): ["127.0.0.1"]}) as dns:  # no SRV: NOERROR, none
            [(url, record)] = await starting_points("anna@example.org", guard, dns.settings())
        assert (url, record) == ("https://example.org/", None)
        assert dns.queries == [(SRV, "SRV"), (PLAIN_SRV, "SRV")]
        port_url = f"https://example.org:{server.port}/"  # the test server's own port
        fingerprint = await peer_fingerprint(port_url, guard)
        async with Door(port_url, LOGIN, guard, fingerprint=fingerprint) as door:
            assert await CalDav(door).principal() == f"https://example.org:{server.port}/dav/anna/"
        assert server.seen == [("PROPFIND", "/.well-known/caldav", LOGIN.header()),
                               ("PROPFIND", "/dav/", LOGIN.header())]


@pytest.mark.timing
async def test_a_silent_dns_server_is_a_sentence_and_the_form_keeps_the_input(make_app) -> None:
    from tests.caldav_servers import caldav_of
    from tests.web_helpers import ALICE, web_harness

    h = await web_harness(make_app, secret_key="test-secret-key-for-caldav")
    client = await h.client(ALICE)
    with DnsServer() as dns:
        dns.silent = True
        caldav_of(h.app).dns = dns.settings(lifetime=0.3)
        status, body = await client.post("/connections/caldav/add", {
            "url": "anna@example.org", "username": "anna", "password": "app-password-1"})
    assert status == 400
    assert (f"The DNS server did not answer the lookup of {SRV}. Try again later, or enter "
            "the calendar server&#39;s full address") in body
    assert 'value="anna@example.org"' in body and 'value="anna"' in body
    assert "app-password-1" not in body
    assert dns.queries and dns.queries[0] == (SRV, "SRV")
    assert await h.app.deps.connections.accounts(ALICE, "caldav") == []
    await client.close()
    await h.server.stop()


async def test_a_typed_url_is_not_looked_up_in_dns() -> None:
    with DnsServer() as dns:
        points = await starting_points("https://caldav.example.org/dav/", AddressGuard(),
                                       dns.settings())
    assert points == [("https://caldav.example.org/dav/", None)] and dns.queries == []
