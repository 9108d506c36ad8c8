"""A local web site for web_fetch tests, with a resolver and a dialer that record their use.

`FakeSite` serves pages on 127.0.0.1 and records every request it receives, so a
test can assert that a refused fetch reached nothing. `FakeDNS` stands in for the
system resolver (name -> answers, or successive answers for a rebinding name) and
records each lookup. `RecordingDialer` is what the fetcher calls with a checked
address: it maps chosen public addresses to the local site (so `public.test` at
93.184.215.14 is served by 127.0.0.1:port in tests) and records every connection
attempt — none may happen for a refused URL.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import ssl
from collections.abc import Sequence

from aiohttp import web

PUBLIC_IP = "93.184.215.14"  # a globally routable address, routed to the local site in tests
OTHER_PUBLIC_IP = "93.184.215.15"

ARTICLE = """<!doctype html>
<html><head><title>Otter facts</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a> | <a href="/shop">Shop</a></nav>
<article>
<h1>Otter facts</h1>
<p>Sea otters hold hands while they sleep so that they do not drift apart on the water.
This behaviour is called rafting, and groups of resting otters are known as rafts.</p>
<p>An otter's fur is the densest of any animal, with up to a million hairs per square inch,
which keeps it warm in cold water without a layer of blubber.</p>
</article>
<footer>Copyright 2026 Otter Society. Cookie settings. Privacy policy.</footer>
</body></html>
"""


def make_pdf(pages: Sequence[str]) -> bytes:
    """A valid PDF with one line of Helvetica text per page (offsets counted by hand)."""
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font_id = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        content_id = 4 + 2 * i
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_id} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def gzip_bomb(decoded_bytes: int) -> bytes:
    """Gzip of `decoded_bytes` of repetitive text (50 MB compresses to about 50 KB)."""
    block = b"all work and no play makes a dull page\n" * 26_000  # ~1 MB
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9) as out:
        written = 0
        while written < decoded_bytes:
            piece = block[: decoded_bytes - written]
            out.write(piece)
            written += len(piece)
    return raw.getvalue()


class FakeSite:
    """aiohttp pages on 127.0.0.1; `requests` lists (path, Host header) of everything served."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[tuple[str, str]] = []
        self.port = 0
        self.tls_port = 0  # serving the same pages over TLS when `tls` is given
        self.tls = tls
        self.bomb = b""
        self._runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        """http://127.0.0.1:PORT"""
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        """The paths requested so far."""
        return [path for path, _ in self.requests]

    async def __aenter__(self) -> FakeSite:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/article", self._article)
        app.router.add_get("/plain", self._plain)
        app.router.add_get("/doc.pdf", self._pdf)
        app.router.add_get("/untyped-pdf", self._untyped_pdf)
        app.router.add_get("/image.png", self._image)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/bomb", self._bomb)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/missing", self._missing)
        app.router.add_get("/secret", self._secret)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        if self.tls is not None:
            secure = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
            await secure.start()
            self.tls_port = secure._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.requests.append((request.path, request.headers.get("Host", "")))
        return await handler(request)

    async def _article(self, request: web.Request) -> web.Response:
        return web.Response(text=ARTICLE, content_type="text/html", charset="utf-8")

    async def _plain(self, request: web.Request) -> web.Response:
        return web.Response(text="just words, no markup", content_type="text/plain")

    async def _pdf(self, request: web.Request) -> web.Response:
        body = make_pdf(["Quarterly otter census", "Rafts counted: 42"])
        return web.Response(body=body, content_type="application/pdf")

    async def _untyped_pdf(self, request: web.Request) -> web.Response:
        body = make_pdf(["No content type here"])
        return web.Response(body=body, headers={"Content-Type": "application/octet-stream"})

    async def _image(self, request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n....", content_type="image/png")

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def _bomb(self, request: web.Request) -> web.StreamResponse:
        headers = {"Content-Type": "text/plain", "Content-Encoding": "gzip"}
        return web.Response(body=self.bomb, headers=headers)

    async def _slow(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for _ in range(100):
            await response.write(b"drip ")
            await asyncio.sleep(0.05)
        return response

    async def _missing(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="not here")

    async def _secret(self, request: web.Request) -> web.Response:
        return web.Response(text="the router's admin password", content_type="text/plain")


def tls_pair(name: str) -> tuple[ssl.SSLContext, ssl.SSLContext, list[str]]:
    """A server context with a certificate for `name` (signed by a test CA), a client context
    trusting only that CA, and a list that collects the SNI names the server is sent."""
    import datetime
    import tempfile

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Panager test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    folder = tempfile.mkdtemp(prefix="panager-tls-")
    cert_path, key_path = f"{folder}/leaf.pem", f"{folder}/leaf.key"
    with open(cert_path, "wb") as out:
        out.write(leaf.public_bytes(pem))
    with open(key_path, "wb") as out:
        out.write(
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    names: list[str] = []
    server.sni_callback = lambda sock, sni, ctx: names.append(sni) and None
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return server, client, names


class FakeDNS:
    """Resolver: `table[name]` is a list of addresses, or a list of successive answer lists."""

    def __init__(self, table: dict[str, list]) -> None:
        self.table = table
        self.calls: list[str] = []
        self._served: dict[str, int] = {}

    async def __call__(self, host: str) -> list[str]:
        self.calls.append(host)
        answers = self.table.get(host)
        if answers is None:
            raise OSError(f"no such host {host}")
        if answers and isinstance(answers[0], list):  # successive answers (rebinding)
            index = self._served.get(host, 0)
            self._served[host] = index + 1
            return list(answers[min(index, len(answers) - 1)])
        return list(answers)


class RecordingDialer:
    """Maps checked public addresses to the local site; records every connection attempt."""

    def __init__(self, routes: dict[str, int] | None = None) -> None:
        self.routes = routes or {}
        self.attempts: list[tuple[str, int]] = []

    def __call__(self, ip: str, port: int) -> tuple[str, int]:
        self.attempts.append((ip, port))
        if ip in self.routes:
            return "127.0.0.1", self.routes[ip]
        if ip == "127.0.0.1":
            return ip, port
        return "127.0.0.1", 9  # nothing listens there: never reach a real network in tests
