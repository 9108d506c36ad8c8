"""`panager run` with Telegram settings that cannot work: one line, exit 2, never the token.

Real `panager` processes; Telegram is the local FakeTelegram (or, for a Bot API
URL that redirects forever, a local server doing just that). Starting a process
can take a while on a busy machine, hence the generous waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.cli.test_cli_run import env_for, spawn
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.timeout(300)

TOKEN = "123456789:AAHsecret-telegram-token-for-cli-tests"


async def run_cli(args: list[str], env: dict) -> tuple[int, str, str]:
    proc = await spawn(args, env)
    out, err = await asyncio.wait_for(proc.communicate(), 200)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def assert_one_line(code: int, out: str, err: str, start: str, secret: str = TOKEN) -> str:
    """Exit 2 with exactly one line on stderr starting `panager: <start>`; no secret shown."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"panager: {start}"), lines[0]
    assert secret not in out + err and "Traceback" not in out + err
    return lines[0]


@pytest.mark.parametrize("url", ["localhost:8081", "127.0.0.1:8081", "ftp://bots.example"])
async def test_a_telegram_api_url_without_http_is_one_line_without_the_token(
    db_url, tmp_path, url
):
    env = env_for(db_url, tmp_path, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_URL=url)
    code, out, err = await run_cli(["run", "--components", "telegram"], env)
    line = assert_one_line(code, out, err, "TELEGRAM_API_URL is invalid")
    assert "http:// or https://" in line


@pytest.mark.parametrize("components", ["telegram", "worker"])
async def test_a_malformed_telegram_token_is_one_line(db_url, tmp_path, components):
    secret = "not-a-bot-token-but-a-secret-anyway"
    env = env_for(db_url, tmp_path, TELEGRAM_BOT_TOKEN=secret)
    code, out, err = await run_cli(["run", "--components", components], env)
    assert_one_line(code, out, err, "TELEGRAM_BOT_TOKEN is not a bot token", secret)


@contextlib.asynccontextmanager
async def redirecting_forever() -> AsyncIterator[str]:
    """A server that answers every request with a redirect to itself; yields its base URL."""

    async def handler(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(str(request.url))

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_telegram_start_failures_are_one_line_without_the_token(db_url, tmp_path):
    async with FakeTelegram(token=TOKEN) as fake, redirecting_forever() as loop_url:
        fake.fail_next("getMe", 404, "Not Found")

        def run_against(url: str, home: str):
            env = env_for(db_url, tmp_path / home, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_URL=url)
            return run_cli(["run", "--components", "telegram"], env)

        not_found, not_json, redirects = await asyncio.gather(
            run_against(fake.base_url, "a"),  # a JSON 404, as the Bot API gives
            run_against(fake.base_url + "/not-the-bot-api", "b"),  # a web server's 404 page
            run_against(loop_url, "c"),  # aiohttp's error text holds the URL, token included
        )
    expected = "TELEGRAM_API_URL (http://127.0.0.1:"
    assert "does not answer like the Telegram Bot API" in assert_one_line(*not_found, expected)
    assert "does not answer like the Telegram Bot API" in assert_one_line(*not_json, expected)
    line = assert_one_line(*redirects, f"cannot reach Telegram at {loop_url} ")
    assert "TooManyRedirects" in line and "[telegram-token]" in line
