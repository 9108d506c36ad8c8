"""The CalDAV door: every hop through the address guard, credentials only where they belong,
plain http only where allowed, pinned certificates, and a deadline."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from aiohttp import web

from panager.providers.caldav.dav import CalDav
from panager.providers.caldav.door import (
    AuthFailed,
    CalDavError,
    CertificateUnknown,
    Door,
    Login,
    Unreachable,
    peer_fingerprint,
)
from panager.services.web.guard import AddressGuard, AllowList, Refused
from tests.fakes.web_server import OTHER_PUBLIC_IP, PUBLIC_IP, FakeDNS, RecordingDialer, tls_pair

pytestmark = pytest.mark.timeout(30)

LOGIN = Login("alice", "s3cret-app-password")


def principal_answer(href: str) -> str:
    return (
        '<?xml version="1.0"?><d:multistatus xmlns:d="DAV:"><d:response><d:href>/</d:href>'
        "<d:propstat><d:prop><d:current-user-principal>"
        f"<d:href>{href}</d:href></d:current-user-principal></d:prop>"
        "<d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response></d:multistatus>"
    )


class ScriptedDav:
    """A server answering each path as scripted; records (method, path, Authorization)."""

    def __init__(self, routes: dict[str, web.Response | str] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.routes = routes or {}
        self.seen: list[tuple[str, str, str | None]] = []
        self.hang = asyncio.Event()
        self.tls = tls
        self.port = 0

    async def __aenter__(self) -> ScriptedDav:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.hang.set()
        await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path, request.headers.get("Authorization")))
        answer = self.routes.get(request.path)
        if answer == "hang":
            await self.hang.wait()
        if isinstance(answer, web.Response):
            return answer
        if isinstance(answer, str) and answer != "hang":
            return web.Response(status=207, text=answer, content_type="application/xml")
        return web.Response(status=404)


def loopback_guard() -> AddressGuard:
    return AddressGuard(allow=AllowList.parse(["127.0.0.1"]))


async def test_discovery_href_to_another_local_port_is_refused() -> None:
    async with ScriptedDav() as other, ScriptedDav() as server:
        server.routes["/"] = principal_answer(f"http://127.0.0.1:{other.port}/alice/")
        async with Door(server.url + "/", LOGIN, loopback_guard()) as door:
            with pytest.raises(Refused, match="not the server entered"):
                await CalDav(door).calendars()
        assert other.seen == []


async def test_discovery_href_to_cloud_metadata_is_refused_before_connecting() -> None:
    dialer = RecordingDialer()
    async with ScriptedDav() as server:
        server.routes["/"] = principal_answer("http://169.254.169.254/latest/meta-data/")
        door = Door(server.url + "/", LOGIN, loopback_guard(), dial=dialer)
        async with door:
            with pytest.raises(Refused):
                await CalDav(door).calendars()
        assert all(ip != "169.254.169.254" for ip, _ in dialer.attempts)
        # a URL the person enters that points there is refused by the guard itself
        door = Door("http://169.254.169.254/", LOGIN, loopback_guard(), dial=dialer)
        async with door:
            with pytest.raises(Refused, match="link-local"):
                await CalDav(door).calendars()
        assert all(ip != "169.254.169.254" for ip, _ in dialer.attempts)


async def test_redirect_to_another_domain_gets_no_credentials() -> None:
    async with ScriptedDav() as home, ScriptedDav() as elsewhere:
        home.routes["/.well-known/caldav"] = web.Response(
            status=301, headers={"Location": "http://evil.example.net/dav/"})
        elsewhere.routes["/dav/"] = principal_answer("/dav/alice/")
        dns = FakeDNS({"dav.example.com": [PUBLIC_IP], "evil.example.net": [OTHER_PUBLIC_IP]})
        dialer = RecordingDialer({PUBLIC_IP: home.port, OTHER_PUBLIC_IP: elsewhere.port})
        guard = AddressGuard(dns, AllowList.parse(["dav.example.com", "evil.example.net"]))
        async with Door("http://dav.example.com/", LOGIN, guard, dial=dialer) as door:
            with pytest.raises(Refused, match="not the server entered"):
                await CalDav(door).principal()
        assert home.seen and all(auth == LOGIN.header() for _, _, auth in home.seen)
        assert elsewhere.seen == [("PROPFIND", "/dav/", None)]


async def test_plain_http_to_a_public_host_is_refused() -> None:
    dialer = RecordingDialer()
    guard = AddressGuard(FakeDNS({"dav.example.com": [PUBLIC_IP]}))
    async with Door("http://dav.example.com/", LOGIN, guard, dial=dialer) as door:
        with pytest.raises(Refused, match="Plain http"):
            await CalDav(door).calendars()
    assert dialer.attempts == []


async def test_wrong_password_is_one_clear_line(caldav_servers) -> None:
    server = caldav_servers["radicale"]
    async with Door(server.url + "/", Login("alice", "wrong"), loopback_guard()) as door:
        with pytest.raises(AuthFailed) as failed:
            await CalDav(door).calendars()
    message = str(failed.value)
    assert message == (
        f"The calendar server at {server.url} refused the user name or password."
    )
    assert "wrong" not in message


@pytest.mark.timing
async def test_a_hanging_server_is_a_sentence() -> None:
    async with ScriptedDav() as server:
        server.routes["/"] = "hang"
        async with Door(server.url + "/", LOGIN, loopback_guard(), deadline=0.5) as door:
            with pytest.raises(Unreachable) as slow:
                await CalDav(door).calendars()
    assert str(slow.value) == f"The calendar server at {server.url} did not answer within 0.5 s."


async def test_own_certificate_is_accepted_only_by_its_pinned_fingerprint() -> None:
    server_tls, _client, _names = tls_pair("dav.home.test")
    async with ScriptedDav(tls=server_tls) as server:
        server.routes["/"] = principal_answer("/alice/")
        dns = FakeDNS({"dav.home.test": ["127.0.0.1"]})
        guard = AddressGuard(dns, AllowList.parse(["127.0.0.1"]))
        url = f"https://dav.home.test:{server.port}/"

        async with Door(url, LOGIN, guard) as door:
            with pytest.raises(CertificateUnknown):
                await CalDav(door).principal()
        assert server.seen == []  # no request (no password) before the certificate is trusted

        fingerprint = await peer_fingerprint(url, guard)
        assert fingerprint is not None and len(fingerprint) == 95

        async with Door(url, LOGIN, guard, fingerprint=fingerprint) as door:
            assert await CalDav(door).principal() == f"https://dav.home.test:{server.port}/alice/"
        assert server.seen == [  # the well-known address first (not there), then the one entered
            ("PROPFIND", "/.well-known/caldav", LOGIN.header()),
            ("PROPFIND", "/", LOGIN.header()),
        ]

        wrong = "AA:" * 31 + "AA"
        async with Door(url, LOGIN, guard, fingerprint=wrong) as door:
            with pytest.raises(CalDavError, match="different certificate"):
                await CalDav(door).principal()
        assert len(server.seen) == 2


async def test_a_redirect_within_the_registrable_domain_keeps_the_password() -> None:
    """iCloud's way: caldav.example.com sends the client to p42-caldav.example.com (https,
    same registrable domain): the password goes along; to another domain it does not."""
    server_tls, _client, _names = tls_pair("caldav.example.com")
    async with ScriptedDav(tls=server_tls) as server:  # one server answers every name
        server.routes["/.well-known/caldav"] = web.Response(status=301, headers={
            "Location": f"https://p42-caldav.example.com:{server.port}/dav/"})
        server.routes["/dav/"] = principal_answer(
            f"https://p42-caldav.example.com:{server.port}/dav/alice/")
        names = ("caldav.example.com", "p42-caldav.example.com", "caldav.example.net")
        guard = AddressGuard(FakeDNS({n: ["127.0.0.1"] for n in names}),
                             AllowList.parse(["127.0.0.1"]))
        fingerprint = await peer_fingerprint(f"https://caldav.example.com:{server.port}/",
                                             guard)
        url = f"https://caldav.example.com:{server.port}/"
        async with Door(url, LOGIN, guard, fingerprint=fingerprint) as door:
            found = await CalDav(door).principal()
        assert found == f"https://p42-caldav.example.com:{server.port}/dav/alice/"
        assert server.seen == [("PROPFIND", "/.well-known/caldav", LOGIN.header()),
                               ("PROPFIND", "/dav/", LOGIN.header())]

        server.seen.clear()
        server.routes["/.well-known/caldav"] = web.Response(status=301, headers={
            "Location": f"https://caldav.example.net:{server.port}/dav/"})
        async with Door(url, LOGIN, guard, fingerprint=fingerprint) as door:
            with pytest.raises(Refused, match="not the server entered"):
                await CalDav(door).principal()
        assert server.seen[1] == ("PROPFIND", "/dav/", None)  # example.net: no password
