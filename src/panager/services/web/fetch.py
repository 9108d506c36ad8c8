"""`WebFetcher`: one web page or PDF as readable text, every hop behind the address guard.

- httpx with `trust_env=False`: no proxy, netrc or certificate file from the
  environment decides where a request goes.
- Redirects are followed here, not by httpx (at most `max_redirects`), so each
  hop's URL is parsed and its addresses checked again before anything connects.
- One overall deadline (10 s) covers resolution, every hop, the body and the
  extraction — not a timeout per operation that a slow server could stretch.
- At most `max_bytes` (2 MB) of *decoded* body: gzip and deflate are inflated
  here, a bounded piece at a time, so a compressed bomb stops at the cap
  without ever being held in memory whole. Other content encodings are refused
  (only gzip and deflate are asked for).
- HTML, PDF and plain text are turned into text (`extract.py`, bytes only);
  other types are refused before their body is read.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from panager.services.web.extract import (
    ExtractionError,
    Kind,
    charset_of,
    extract,
    kind_of,
    needs_sniffing,
    sniff,
)
from panager.services.web.guard import (
    AddressGuard,
    CheckedTarget,
    Dialer,
    PinnedBackend,
    Refused,
    WebError,
    direct,
)

MAX_BYTES = 2_000_000
MAX_REDIRECTS = 5
DEADLINE_SECONDS = 10.0
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
HEADERS = {
    "User-Agent": "Panager/0.1 (personal assistant; web_fetch)",
    "Accept": "text/html,application/xhtml+xml,application/pdf,text/plain;q=0.9,*/*;q=0.1",
    "Accept-Encoding": "gzip, deflate",
}
HTTPCORE_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
)


@dataclass(frozen=True)
class Page:
    """A fetched document as text."""

    url: str  # where it was finally read from (after redirects)
    kind: Kind
    text: str
    title: str | None
    truncated: bool  # the body was longer than the cap; the text covers its start
    size: int  # decoded bytes read


class PinnedTransport(httpx.AsyncBaseTransport):
    """httpx over httpcore's pool with the guard's pinned network backend.

    httpx 0.28 does not take a network backend, so this transport hands httpx's
    request to an `httpcore.AsyncConnectionPool` built with one (both public APIs)."""

    def __init__(self, backend: PinnedBackend, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, network_backend=backend, max_connections=4
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request through the pinned pool."""
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core)
        except HTTPCORE_ERRORS as exc:
            raise httpx.TransportError(str(exc) or type(exc).__name__) from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_CoreStream(response),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the pool's connections."""
        await self._pool.aclose()


class _CoreStream(httpx.AsyncByteStream):
    def __init__(self, response: httpcore.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_stream():
                yield chunk
        except HTTPCORE_ERRORS as exc:
            raise httpx.TransportError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class CappedDecoder:
    """Content-Encoding decoding that never produces more than `limit` bytes."""

    def __init__(self, encoding: str, limit: int) -> None:
        name = encoding.strip().lower()
        if name in ("", "identity"):
            self._inflate = None
        elif name in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif name == "deflate":
            self._inflate = zlib.decompressobj(32 + zlib.MAX_WBITS)  # zlib or gzip header
        else:
            raise WebError(f"The server sent the page {name!r}-encoded, which is not supported.")
        self.limit = limit
        self.body = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> bool:
        """Decode `chunk`; False once the cap is reached (stop reading)."""
        room = self.limit - len(self.body)
        if self._inflate is None:
            piece = chunk[: room + 1]
        else:
            try:  # at most room + 1 bytes: one more than fits tells the body is longer
                piece = self._inflate.decompress(chunk, room + 1)
            except zlib.error:
                raise WebError("The page's compressed data is damaged.") from None
        if len(piece) > room:
            self.body.extend(piece[:room])
            self.truncated = True
            return False
        self.body.extend(piece)
        return True


async def read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The decoded body, at most `limit` bytes, and whether it was longer."""
    decoder = CappedDecoder(response.headers.get("content-encoding", ""), limit)
    async for chunk in response.aiter_raw():
        if not decoder.feed(chunk):
            break
    return bytes(decoder.body), decoder.truncated


@dataclass
class WebFetcher:
    """Fetches pages through `guard`; `dial` and `ssl_context` are injected in tests."""

    guard: AddressGuard
    dial: Dialer = direct
    ssl_context: ssl.SSLContext | None = None
    max_bytes: int = MAX_BYTES
    max_redirects: int = MAX_REDIRECTS
    deadline: float = DEADLINE_SECONDS

    async def fetch(self, url: str) -> Page:
        """The readable text at `url`; raise `WebError` (or `Refused`) with a clear message."""
        try:
            async with asyncio.timeout(self.deadline):
                return await self._fetch(url)
        except TimeoutError:
            raise WebError(
                f"Fetching {url[:200]} took longer than {self.deadline:g} s and was stopped."
            ) from None
        except httpx.HTTPError as exc:
            raise WebError(f"Could not fetch {url[:200]}: {_network_reason(exc)}.") from None

    async def _fetch(self, url: str) -> Page:
        backend = PinnedBackend(self.dial)
        context = self.ssl_context or _default_tls()
        transport = PinnedTransport(backend, context)
        async with httpx.AsyncClient(
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            headers=HEADERS,
            timeout=self.deadline,
        ) as client:
            current = url
            for hop in range(self.max_redirects + 1):
                try:
                    page, current = await self._hop(client, backend, current)
                except WebError as exc:
                    exc.outside = exc.outside or hop > 0  # a redirect target came from a server
                    raise
                if page is not None:
                    return page
        raise WebError(f"{url[:200]} redirected more than {self.max_redirects} times; stopped.")

    async def _hop(
        self, client: httpx.AsyncClient, backend: PinnedBackend, url: str
    ) -> tuple[Page | None, str]:
        """One request: the page, or None and the URL a redirect points to."""
        target = await self.guard.check(url)
        backend.pin(target)
        async with client.stream("GET", str(target.url)) as response:
            location = response.headers.get("location")
            if response.status_code in REDIRECT_CODES and location:
                return None, _redirect_target(target, location)
            return await self._read(target, response), url

    async def _read(self, target: CheckedTarget, response: httpx.Response) -> Page:
        where = str(target.url)
        if response.status_code >= 400:
            raise WebError(f"{where} answered HTTP {response.status_code}; no page to read.")
        content_type = response.headers.get("content-type", "")
        kind = kind_of(content_type)
        if kind is None and not needs_sniffing(content_type):
            raise WebError(_unsupported(where, content_type), outside=True)
        body, truncated = await read_capped(response, self.max_bytes)
        kind = kind or sniff(body)
        if kind is None:
            raise WebError(_unsupported(where, content_type or "no type"), outside=True)
        if kind == "pdf" and truncated:
            raise WebError(
                f"The PDF at {where} is larger than {self.max_bytes // 1_000_000} MB; "
                "it was not read."
            )
        try:
            extracted = await asyncio.to_thread(extract, body, kind, charset_of(content_type))
        except ExtractionError as exc:
            raise WebError(f"{where}: {exc}") from None
        return Page(where, kind, extracted.text, extracted.title, truncated, len(body))


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """Certificate verification against certifi's roots, none from the environment."""
    return httpx.create_ssl_context(trust_env=False)


def _redirect_target(target: CheckedTarget, location: str) -> str:
    try:
        return str(httpx.URL(str(target.url)).join(location.strip()))
    except (httpx.InvalidURL, ValueError):
        raise Refused(f"{target.url} redirected to an invalid address.") from None


def _unsupported(where: str, content_type: str) -> str:
    media = content_type.split(";", 1)[0].strip()[:80]
    return (
        f"{where} is {media!r}, which web_fetch does not read: it reads web pages (HTML), "
        "PDF and plain text."
    )


def _network_reason(exc: Any) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "the server did not answer in time"
    if "CERTIFICATE" in str(exc).upper():
        return "its TLS certificate could not be verified"
    if isinstance(exc.__cause__, httpcore.ConnectError) or isinstance(exc, httpx.ConnectError):
        return "the server could not be reached"
    return f"the connection failed ({type(exc).__name__})"
