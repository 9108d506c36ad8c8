# Over 400 lines, kept whole: the one door of every CalDAV request; the guard, credential and TLS
# rules read best side by side.
"""The door every CalDAV request goes through: the address guard, credentials, TLS, deadline.

A CalDAV server tells the client where to go next — `/.well-known/caldav`
redirects, a principal URL, a calendar home, one `href` per calendar and per
event. Each of those is outside text, so each hop is checked here before
anything connects:

- **The address guard** (`services/web/guard.py`): every URL is parsed strictly,
  its name resolved once and every answer judged; the connection goes to a
  checked address (`PinnedBackend`), never to a second lookup (no DNS rebinding).
  Private, loopback and link-local addresses (169.254.169.254) are refused unless
  the operator listed them in `web_fetch_allow`.
- **Where an href may point**: only to an origin this account trusts — the one the
  person entered, or one a redirect reached over https under the same registrable
  domain (iCloud sends `caldav.icloud.com` to `pNN-caldav.icloud.com`). An href to
  127.0.0.1 on another port, or to any other host, is refused.
- **Credentials** go only to a trusted origin; a redirect elsewhere is followed
  without them.
- **Plain http** only to a loopback address or a host in `web_fetch_allow`.
- **TLS** is always verified against the system's roots (certifi), except for a
  server whose certificate's SHA-256 fingerprint the person pinned on the
  Connections page: then exactly that certificate is accepted, checked right after
  the handshake, before a byte of the request (or a password) is sent.
- **One deadline** per request covers resolution, connection, redirects and body.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import ipaddress
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpcore
import httpx
from tld import get_fld

from panager.services.web.fetch import PinnedTransport
from panager.services.web.guard import (
    AddressGuard,
    CheckedTarget,
    Dialer,
    ParsedURL,
    PinnedBackend,
    Refused,
    direct,
    parse_url,
)

DEADLINE_SECONDS = 15.0
MAX_REDIRECTS = 5
MAX_BODY = 20_000_000  # one REPORT answer; a month of a busy calendar is well under 1 MB
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "Panager/0.1 (personal assistant; CalDAV)"


class CalDavError(Exception):
    """A CalDAV request that could not be done; the message is one sentence for the person."""


class AuthFailed(CalDavError):
    """The server refused the user name or password."""


class Unreachable(CalDavError):
    """The server could not be reached, did not answer in time, or broke the connection."""


class PreconditionFailed(CalDavError):
    """An If-Match or If-None-Match did not hold: the object changed on the server."""


class CertificateUnknown(CalDavError):
    """TLS verification failed; `fingerprint` is the certificate's SHA-256 (to show and pin)."""

    def __init__(self, message: str, fingerprint: str | None) -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


@dataclass(frozen=True)
class Login:
    """A CalDAV user name and app password; the password never appears in a repr."""

    username: str
    password: str = field(repr=False)

    def header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: ParsedURL) -> Origin:
        return cls(url.scheme, url.host, url.port)

    def __str__(self) -> str:
        default = 443 if self.scheme == "https" else 80
        port = "" if self.port == default else f":{self.port}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{port}"


@dataclass
class Answer:
    """One response, read whole (bounded)."""

    status: int
    url: str  # where it was finally read from
    headers: httpx.Headers
    body: bytes

    @property
    def etag(self) -> str | None:
        return self.headers.get("etag")

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def fingerprint_of(der: bytes) -> str:
    """A certificate's SHA-256 fingerprint as people see it: AB:CD:…"""
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def normalise_fingerprint(text: str) -> str:
    """Accept a fingerprint with or without colons, any case; raise ValueError otherwise."""
    hexes = "".join(ch for ch in text if ch not in ": ").upper()
    if len(hexes) != 64 or any(ch not in "0123456789ABCDEF" for ch in hexes):
        raise ValueError("A certificate fingerprint is 64 hexadecimal digits (SHA-256).")
    return ":".join(hexes[i : i + 2] for i in range(0, 64, 2))


def registrable_domain(host: str) -> str | None:
    """example.co.uk for caldav.example.co.uk; None for an address or an unknown suffix."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    found = get_fld(host, fix_protocol=True, fail_silently=True)
    return str(found) if found else None


class _PinnedStream(httpcore.AsyncNetworkStream):
    """A stream whose TLS handshake must present one pinned certificate."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, pinned: str) -> None:
        self._inner = inner
        self._pinned = pinned

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        ssl_object = stream.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der is None or fingerprint_of(der) != self._pinned:
            await stream.aclose()
            raise httpcore.ConnectError("the server's certificate is not the pinned one")
        return _PinnedStream(stream, self._pinned)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _FingerprintBackend(PinnedBackend):
    """The guard's pinned backend whose TLS streams must show the pinned certificate."""

    def __init__(self, dial: Dialer, pinned: str) -> None:
        super().__init__(dial)
        self._pinned_cert = pinned

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return _PinnedStream(await super().connect_tcp(*args, **kwargs), self._pinned_cert)


@functools.cache
def _verifying_context() -> ssl.SSLContext:
    """One per process: loading the CA bundle takes tens of milliseconds of CPU, and every
    listing opens a door; a context is safe to share (it holds no connection)."""
    return httpx.create_ssl_context(trust_env=False)


def _pinning_context() -> ssl.SSLContext:
    """No chain or name check: the pinned fingerprint, checked after the handshake, decides."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Door:
    """Every request of one CalDAV account. Open it with `async with`."""

    def __init__(
        self,
        entered_url: str,
        login: Login,
        guard: AddressGuard,
        *,
        fingerprint: str | None = None,
        dial: Dialer = direct,
        ssl_context: ssl.SSLContext | None = None,
        deadline: float = DEADLINE_SECONDS,
    ) -> None:
        self.entered = parse_url(entered_url)
        self.login = login
        self.guard = guard
        self.deadline = deadline
        self.trusted: set[Origin] = {Origin.of(self.entered)}
        self._domain = registrable_domain(self.entered.host)
        self.fingerprint = normalise_fingerprint(fingerprint) if fingerprint else None
        if self.fingerprint:
            self._backend: PinnedBackend = _FingerprintBackend(dial, self.fingerprint)
            context = ssl_context or _pinning_context()
        else:
            self._backend = PinnedBackend(dial)
            context = ssl_context or _verifying_context()
        self._client = httpx.AsyncClient(
            transport=PinnedTransport(self._backend, context),
            trust_env=False,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            timeout=deadline,
        )

    async def __aenter__(self) -> Door:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def where(self) -> str:
        return str(Origin.of(self.entered))

    def resolve(self, base: str, href: str) -> str:
        """An href a server returned, made absolute and checked to stay with this account."""
        try:
            # urljoin (RFC 3986 resolution) rather than httpx.URL.join: a listing resolves one
            # href per event, and parse_url below judges the result strictly either way
            joined = urljoin(base, href.strip())
        except ValueError:
            raise Refused("The calendar server returned an invalid address; refused.") from None
        url = parse_url(joined)
        if Origin.of(url) not in self.trusted:
            raise Refused(
                f"The calendar server pointed at {Origin.of(url)}, which is not the server "
                f"entered ({self.where}); refused."
            )
        return str(url)

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        allowed: Iterable[int] = (),
    ) -> Answer:
        """Send one request (following redirects here, each hop checked); raise CalDavError
        for refusals, authentication failures, time-outs and unexpected statuses."""
        try:
            async with asyncio.timeout(self.deadline):
                answer = await self._follow(method, url, body, dict(headers or {}))
        except TimeoutError:
            raise Unreachable(
                f"The calendar server at {self.where} did not answer within "
                f"{self.deadline:g} s."
            ) from None
        except httpx.HTTPError as exc:
            raise self._network_error(exc) from None
        if answer.status == 401:
            raise AuthFailed(
                f"The calendar server at {self.where} refused the user name or password."
            )
        if answer.status == 412:
            raise PreconditionFailed("The event was changed on the server meanwhile.")
        if answer.status >= 400 and answer.status not in set(allowed):
            raise CalDavError(
                f"The calendar server at {self.where} answered HTTP {answer.status} to "
                f"{method}."
            )
        return answer

    async def _follow(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> Answer:
        current = url
        for _hop in range(MAX_REDIRECTS + 1):
            target = await self._check(current)
            answer = await self._send(method, target, body, headers)
            location = answer.headers.get("location")
            if answer.status in REDIRECT_CODES and location:
                current = self._redirected(target.url, location)
                if answer.status == 303:
                    method, body = "GET", None
                continue
            return answer
        raise CalDavError(f"The calendar server at {self.where} redirected too many times.")

    async def _check(self, url: str) -> CheckedTarget:
        parsed = parse_url(url)
        target = await self.guard.check(parsed)
        if parsed.scheme == "http" and not self._plain_http_allowed(target):
            raise Refused(
                f"Plain http to {Origin.of(parsed)} is refused: a password would cross the "
                "network unencrypted. Use https (plain http is only for this machine or hosts "
                "the operator lists in web_fetch_allow)."
            )
        self._backend.pin(target)
        return target

    def _plain_http_allowed(self, target: CheckedTarget) -> bool:
        return all(
            ip.is_loopback or self.guard.allow.permits(target.url.host, ip)
            for ip in target.addresses
        )

    def _redirected(self, source: ParsedURL, location: str) -> str:
        try:
            joined = str(httpx.URL(str(source)).join(location.strip()))
        except (httpx.InvalidURL, ValueError):
            raise Refused("The calendar server redirected to an invalid address.") from None
        url = parse_url(joined)
        origin = Origin.of(url)
        if (
            Origin.of(source) in self.trusted
            and origin not in self.trusted
            and url.scheme == "https"
            and self._domain is not None
            and registrable_domain(url.host) == self._domain
        ):
            self.trusted.add(origin)  # iCloud: caldav.icloud.com -> p42-caldav.icloud.com
        return str(url)

    async def _send(
        self, method: str, target: CheckedTarget, body: bytes | None, headers: dict[str, str]
    ) -> Answer:
        sent = dict(headers)
        if Origin.of(target.url) in self.trusted:
            sent["Authorization"] = self.login.header()
        async with self._client.stream(method, str(target.url), content=body, headers=sent) as r:
            data = bytearray()
            async for chunk in r.aiter_bytes():
                data.extend(chunk)
                if len(data) > MAX_BODY:
                    raise CalDavError(
                        f"The calendar server at {self.where} sent more than "
                        f"{MAX_BODY // 1_000_000} MB in one answer; stopped."
                    )
            return Answer(r.status_code, str(target.url), r.headers, bytes(data))

    def _network_error(self, exc: httpx.HTTPError) -> CalDavError:
        text = str(exc)
        if "pinned" in text:
            return CalDavError(
                f"The calendar server at {self.where} showed a different certificate from the "
                "one pinned; check the server, then pin its new fingerprint on the Connections "
                "page."
            )
        if "CERTIFICATE" in text.upper():
            return CertificateUnknown(
                f"The calendar server at {self.where} has a certificate that could not be "
                "verified.",
                None,
            )
        if isinstance(exc, httpx.TimeoutException):
            return Unreachable(f"The calendar server at {self.where} did not answer in time.")
        return Unreachable(f"The calendar server at {self.where} could not be reached.")


async def peer_fingerprint(url: str, guard: AddressGuard, dial: Dialer = direct) -> str | None:
    """The SHA-256 fingerprint of the certificate `url`'s server shows (to offer pinning);
    the address guard decides whether it may be contacted at all."""
    parsed = parse_url(url)
    if parsed.scheme != "https":
        return None
    target = await guard.check(parsed)
    host, port = dial(str(target.addresses[0]), parsed.port)
    context = _pinning_context()
    try:
        async with asyncio.timeout(DEADLINE_SECONDS):
            _reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=parsed.host
            )
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
        return fingerprint_of(der) if der else None
    finally:
        writer.close()
