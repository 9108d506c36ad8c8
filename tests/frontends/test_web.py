"""The web server: /healthz against a live and a dropped database, /metrics, the terminal
starter (port taken → one line, no crash), and the callback when Google is not configured."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import aiohttp
import psycopg
import pytest

from panager.frontends.terminal.chat import BACKGROUND_STARTERS
from panager.frontends.web.server import start_for_terminal, start_web
from tests.fakes.google_server import FakeGoogle
from tests.google_helpers import google_settings

pytestmark = pytest.mark.timeout(60)


async def get(url: str, headers: dict | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, await response.text()


@pytest.mark.timing
async def test_healthz_is_200_then_503_when_the_database_is_gone(make_app, db_url, pg_server_url):
    app = await make_app(http_port=0)  # a free port: spawned `panager chat`s use the default
    server = await start_web(app)
    assert server.port > 0 and server.host == "127.0.0.1"
    status, body = await get(server.url + "/healthz")
    assert status == 200 and '"database": "ok"' in body

    name = urlsplit(db_url).path.lstrip("/")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    started = time.monotonic()
    status, body = await get(server.url + "/healthz")
    assert status == 503 and "unreachable" in body
    assert time.monotonic() - started < 5

    status, _ = await get(server.url + "/metrics")
    assert status == 404  # off without PANAGER_METRICS_TOKEN
    app.settings.metrics_token = "t" * 40
    status, _ = await get(server.url + "/metrics", headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, metrics = await get(
        server.url + "/metrics", headers={"Authorization": "Bearer " + "t" * 40}
    )
    assert status == 200
    assert 'panager_http_requests_total{path="/healthz",status="200"} 1' in metrics
    assert 'panager_http_requests_total{path="/healthz",status="503"} 1' in metrics
    await server.stop()
    await server.stop()  # idempotent (it is also in app.closers)


async def test_callback_without_google_configured_says_so(make_app):
    app = await make_app(http_port=0)
    server = await start_web(app)
    status, body = await get(server.url + "/oauth/google/callback?state=a.b&code=c")
    assert status == 404 and "not configured" in body


async def test_terminal_starter_serves_when_google_is_configured(make_app, capsys):
    assert start_for_terminal in BACKGROUND_STARTERS
    plain = await start_for_terminal(await make_app(http_port=0))  # the web page, no Google
    assert plain is not None and (await get(plain.url + "/healthz"))[0] == 200
    fake = FakeGoogle()  # only its client id/secret are used here
    app = await make_app(**google_settings(fake))
    server = await start_for_terminal(app)
    assert server is not None and (await get(server.url + "/healthz"))[0] == 200

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = await make_app(**{**google_settings(fake), "http_port": port})
        assert await start_for_terminal(busy) is None
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and f"127.0.0.1:{port}" in out[0] and "PANAGER_HTTP_PORT" in out[0]


async def test_chat_keeps_going_when_the_port_is_taken(db_url, tmp_path):
    from tests.cli.test_cli import cli_env, run_cli

    env = cli_env(db_url, tmp_path)
    env.update(
        GOOGLE_CLIENT_ID="id.apps.googleusercontent.com",
        GOOGLE_CLIENT_SECRET="s",
        PANAGER_SECRET_KEY="k" * 32,
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env["PANAGER_HTTP_PORT"] = str(taken.getsockname()[1])
        code, out, err = await run_cli(["chat"], env, "/connect google\n")
    assert code == 0, err
    assert sum("Web server not started" in line for line in out.splitlines()) == 1
    assert "Connect Google: http://localhost:8765/oauth/google/start?state=" in out
    assert "Traceback" not in out + err
