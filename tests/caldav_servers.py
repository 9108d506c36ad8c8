"""Two real CalDAV servers for tests: Radicale and Xandikos, from the package index.

Each runs in this process, in a thread, behind a threaded WSGI server bound to a
loopback port chosen by the kernel: the socket is listening before `start_*`
returns, so nothing waits for a server to come up. One of each is started per
test session per pytest-xdist worker (fixtures in tests/conftest.py), with its own
data folder, users and passwords.

Radicale checks passwords itself (htpasswd, plain, no failed-login delay).
Xandikos has no accounts of its own (it is meant to sit behind a proxy that checks
them), so `BasicAuth` plays that proxy here: the same users and passwords.
"""

from __future__ import annotations

import base64
import contextlib
import io
import itertools
import os
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest

USERS = {"alice": "alice-app-password", "bob": "bob-app-password"}
_fresh = itertools.count()


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadedServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class DavServer:
    """One running server: where it is, whose accounts it has, how to stop it."""

    name: str
    url: str  # http://127.0.0.1:PORT
    users: dict[str, str]
    home: Callable[[str], str]  # user -> calendar home path
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, user
    htpasswd: Path | None = None  # Radicale's accounts file (read at every request)
    _server: WSGIServer | None = None
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def calendar_url(self, user: str, slug: str) -> str:
        return f"{self.url}{self.home(user)}{slug}/"

    def new_user(self, prefix: str = "u") -> str:
        """A fresh account of its own (Radicale only): a test that lists "all calendars"
        then sees only its own, whatever other tests of the session made."""
        assert self.htpasswd is not None, f"{self.name} serves one user only"
        name = f"{prefix}{next(_fresh)}"
        self.users[name] = f"{name}-app-password"
        with self.htpasswd.open("a") as out:
            out.write(f"{name}:{self.users[name]}\n")
        return name

    def change_password(self, user: str, password: str) -> None:
        """What a person does at the provider (Radicale only): the stored one stops working."""
        assert self.htpasswd is not None, f"{self.name} serves one user only"
        self.users[user] = password
        self.htpasswd.write_text("".join(f"{u}:{p}\n" for u, p in self.users.items()))

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    # -- setting a server up for a test, over plain HTTP (test code, not Panager's client) --

    def client(self, user: str) -> httpx.Client:
        return httpx.Client(auth=(user, self.users[user]), timeout=10, trust_env=False)

    def make_calendar(self, user: str, slug: str, display_name: str) -> str:
        """MKCALENDAR a calendar (or empty it when it exists); its URL."""
        url = self.calendar_url(user, slug)
        body = (
            '<?xml version="1.0" encoding="utf-8"?>'
            '<C:mkcalendar xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">'
            "<D:set><D:prop>"
            f"<D:displayname>{_xml_text(display_name)}</D:displayname>"
            "<C:supported-calendar-component-set><C:comp name=\"VEVENT\"/>"
            "</C:supported-calendar-component-set>"
            "</D:prop></D:set></C:mkcalendar>"
        )
        with self.client(user) as http:
            http.request("PROPFIND", f"{self.url}{self.home(user)}", headers={"Depth": "0"})
            http.request("DELETE", url)
            answer = http.request("MKCALENDAR", url, content=body.encode())
            if answer.status_code != 201:
                raise RuntimeError(f"{self.name}: MKCALENDAR {url} -> {answer.status_code}")
            self.rename(user, url, display_name, http)
        return url

    def rename(self, user: str, url: str, display_name: str, http: httpx.Client | None = None
               ) -> None:
        """PROPPATCH a calendar's display name (Xandikos ignores it in MKCALENDAR)."""
        body = (
            '<?xml version="1.0" encoding="utf-8"?><D:propertyupdate xmlns:D="DAV:">'
            f"<D:set><D:prop><D:displayname>{_xml_text(display_name)}</D:displayname>"
            "</D:prop></D:set></D:propertyupdate>"
        )
        with contextlib.ExitStack() as stack:
            client = http or stack.enter_context(self.client(user))
            answer = client.request("PROPPATCH", url, content=body.encode(),
                                    headers={"Content-Type": "application/xml"})
            if answer.status_code != 207:
                raise RuntimeError(f"{self.name}: PROPPATCH {url} -> {answer.status_code}")

    def put(self, user: str, calendar_url: str, uid: str, ics: str) -> str:
        """PUT one calendar object; its ETag."""
        with self.client(user) as http:
            answer = http.put(
                f"{calendar_url}{uid}.ics",
                content=ics.encode(),
                headers={"Content-Type": "text/calendar; charset=utf-8"},
            )
            if answer.status_code not in (201, 204):
                raise RuntimeError(f"{self.name}: PUT {uid} -> {answer.status_code}")
            return answer.headers.get("etag", "")


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _serve(name: str, app: Callable[..., Any], users: dict[str, str], home: Callable[[str], str],
           log: bool = True) -> DavServer:
    server = DavServer(name=name, url="", users=users, home=home)
    latency = float(os.environ.get("PANAGER_BENCH_DAV_LATENCY", "0") or 0)  # bench/caldav.py

    def recorded(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        user = _basic_user(environ)
        server.requests.append((environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), user))
        # the body, read to its length: an app that reads "to the end" would otherwise wait
        # for the client to close a kept-alive connection
        length = int(environ.get("CONTENT_LENGTH") or 0)
        environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length) if length else b"")
        if latency:
            time.sleep(latency)  # a network's round trip (a thread per request: others go on)
        return app(environ, start_response)

    wsgi = make_server("127.0.0.1", 0, recorded, server_class=_ThreadedServer,
                       handler_class=_Quiet)
    server.url = f"http://127.0.0.1:{wsgi.server_address[1]}"
    server._server = wsgi
    server._thread = threading.Thread(target=wsgi.serve_forever, name=f"{name}-server",
                                      daemon=True)
    server._thread.start()
    return server


def _basic_user(environ: dict) -> str | None:
    header = environ.get("HTTP_AUTHORIZATION", "")
    if not header.lower().startswith("basic "):
        return None
    try:
        return base64.b64decode(header[6:]).decode().split(":", 1)[0]
    except (ValueError, UnicodeDecodeError):
        return None


class BasicAuth:
    """What the proxy in front of a Xandikos does: HTTP Basic against fixed accounts."""

    def __init__(self, app: Callable[..., Any], users: dict[str, str]) -> None:
        self.app = app
        self.users = users

    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = environ.get("HTTP_AUTHORIZATION", "")
        ok = False
        if header.lower().startswith("basic "):
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                ok = self.users.get(user) == password
            except (ValueError, UnicodeDecodeError):
                ok = False
            if ok:
                environ["REMOTE_USER"] = user
        if not ok:
            start_response("401 Unauthorized", [
                ("WWW-Authenticate", 'Basic realm="xandikos"'),
                ("Content-Type", "text/plain"),
            ])
            return [b"Authentication required"]
        return self.app(environ, start_response)


def start_radicale(folder: Path, users: dict[str, str] = USERS) -> DavServer:
    """Radicale 3 with htpasswd accounts and filesystem storage under `folder`."""
    import radicale
    import radicale.config

    (folder / "collections" / "collection-root").mkdir(parents=True, exist_ok=True)
    htpasswd = folder / "users"
    htpasswd.write_text("".join(f"{u}:{p}\n" for u, p in users.items()))
    configuration = radicale.config.load()
    configuration.update({
        "auth": {"type": "htpasswd", "htpasswd_filename": str(htpasswd),
                 "htpasswd_encryption": "plain", "delay": "0"},
        "storage": {"filesystem_folder": str(folder / "collections")},
        "rights": {"type": "owner_only"},
        "logging": {"level": "warning", "mask_passwords": "True"},
    }, "tests")
    server = _serve("radicale", radicale.Application(configuration), dict(users),
                    home=lambda user: f"/{user}/")
    server.htpasswd = htpasswd
    return server


def start_xandikos(folder: Path, user: str = "alice", password: str | None = None) -> DavServer:
    """Xandikos with one principal (/USER/) behind HTTP Basic: it serves a single user."""
    from xandikos.web import SingleUserFilesystemBackend, XandikosApp

    folder.mkdir(parents=True, exist_ok=True)
    principal = f"/{user}/"
    backend = SingleUserFilesystemBackend(str(folder))
    backend._mark_as_principal(principal)
    backend.create_principal(principal, create_defaults=True)
    app = XandikosApp(backend, current_user_principal=principal)
    users = {user: password or USERS[user]}
    return _serve("xandikos", BasicAuth(app, users), users,
                  home=lambda who: f"/{who}/calendars/")


@contextlib.contextmanager
def dav_servers() -> Iterator[dict[str, DavServer]]:
    """Both servers, in a temporary folder, stopped and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="panager-dav-") as tmp:
        started: dict[str, DavServer] = {}
        try:
            started["radicale"] = start_radicale(Path(tmp) / "radicale")
            started["xandikos"] = start_xandikos(Path(tmp) / "xandikos")
            yield started
        finally:
            for server in started.values():
                server.stop()


def worker_name() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def caldav_servers() -> Iterator[dict[str, DavServer]]:
    """Radicale and Xandikos, started once per test session per worker."""
    with dav_servers() as started:
        yield started


def caldav_of(app: Any) -> Any:
    """The running app's CalDAV provider (registered in panager.app.PROVIDERS)."""
    provider = app.deps.accounts.provider("caldav")
    assert provider is not None, "CalDAV is registered when PANAGER_SECRET_KEY is set"
    return provider
