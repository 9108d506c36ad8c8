"""A front end that fails in an unexpected way: the next one is tried, and the person sees
a short plain sentence, never a library's message or an HTML error page."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiogram.exceptions import ClientDecodeError
from aiohttp import web

from panager.agent.commands import CommandContext, dispatch
from panager.frontends.telegram.api import close_bot, make_bot
from panager.frontends.telegram.messenger import TelegramMessenger
from panager.services.messengers import FanoutMessenger
from panager.services.schedules.delivery import DeliveryFailed
from panager.services.schedules.occurrences import UNEXPECTED_ERROR
from panager.services.schedules.worker import SchedulerWorker
from tests.scheduler_helpers import RecordingMessenger, runs, worker

pytestmark = pytest.mark.timeout(120)

BAD_GATEWAY = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


class ChatRecorder(RecordingMessenger):
    """A recording messenger that names its chat platform."""

    def __init__(self, platform: str, **options) -> None:
        super().__init__(**options)
        self.platform = platform


class UnreachableDiscord:
    """Posts to a port nobody listens on: aiohttp raises ClientConnectorError, as the Discord
    client does when Discord cannot be reached."""

    platform = "discord"

    def __init__(self) -> None:
        with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.attempts = 0

    async def send(self, user, text: str, *, link=None, key=None, offers=()) -> bool:
        self.attempts += 1
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{self.port}/api/v10/channels/1/messages"
            async with session.post(url, json={"content": text}):
                return True


class HtmlTelegram:
    """Fails the way aiogram does when a proxy answers with an HTML 502 page."""

    platform = "telegram"

    async def send(self, user, text: str, *, link=None, key=None, offers=()) -> bool:
        raise ClientDecodeError("Failed to deserialize object", ValueError("bad"), BAD_GATEWAY)


def fixed_route(*platforms: str):
    async def route(user) -> list[str]:
        return list(platforms)

    return route


def bad_gateway(paths: list[str]):
    """A proxy in front of the Bot API with the Bot API down: an nginx 502 page."""

    async def answer(request: web.Request) -> web.Response:
        paths.append(request.path)
        return web.Response(status=502, text=BAD_GATEWAY, content_type="text/html")

    return answer


async def test_telegram_html_502_falls_back_to_discord(make_app):
    app = await make_app()
    person = await app.deps.users.ensure_identity("telegram", 777, "tg_person")
    paths: list[str] = []
    proxy = web.Application()
    proxy.router.add_route("*", "/{tail:.*}", bad_gateway(paths))
    runner = web.AppRunner(proxy)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    bot = make_bot("123456:TEST-fake-token-for-panager-tests-0000", f"http://127.0.0.1:{port}")
    try:
        discord = ChatRecorder("discord")
        fanout = FanoutMessenger(
            [TelegramMessenger(bot, app.deps.users), discord],
            route=fixed_route("telegram", "discord"),
        )
        assert await fanout.send(person, "water the plants") is True
        assert discord.texts() == ["water the plants"]
        assert [p.rsplit("/", 1)[-1] for p in paths] == ["sendMessage"]  # tried first
    finally:
        await close_bot(bot)
        await runner.cleanup()


async def test_unreachable_discord_falls_back_to_telegram(make_app, caplog):
    app = await make_app()
    person = await app.deps.users.ensure_identity("telegram", 778, "both_person")
    discord, telegram = UnreachableDiscord(), ChatRecorder("telegram")
    fanout = FanoutMessenger([discord, telegram], route=fixed_route("discord", "telegram"))
    assert await fanout.send(person, "stand up") is True
    assert discord.attempts == 1 and telegram.texts() == ["stand up"]
    [record] = [r for r in caplog.records if r.name == "panager.services.messengers"]
    assert "ClientConnectorError" in record.getMessage()  # logged once, with its type


async def test_all_front_ends_failing_raise_one_plain_sentence(make_app):
    app = await make_app()
    person = await app.deps.users.ensure_identity("telegram", 779, "nobody_home")
    fanout = FanoutMessenger(
        [UnreachableDiscord(), HtmlTelegram()], route=fixed_route("telegram", "discord")
    )
    with pytest.raises(DeliveryFailed) as err:
        await fanout.send(person, "hello")
    assert str(err.value) == "Telegram could not be reached; Discord could not be reached"


async def test_a_failing_copy_does_not_fail_a_delivered_message(make_app):
    app = await make_app()
    person = await app.deps.users.ensure_identity("telegram", 780, "copy_person")
    telegram, page = ChatRecorder("telegram"), ChatRecorder("web", fail=True)
    fanout = FanoutMessenger([telegram, page], route=fixed_route("telegram"))
    assert await fanout.send(person, "lunch") is True
    assert telegram.texts() == ["lunch"]


async def test_worker_falls_back_past_a_raising_front_end(make_app, clock):
    app = await make_app()
    recorder = ChatRecorder("terminal")
    app.deps.messenger.add(HtmlTelegram())
    app.deps.messenger.add(recorder)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "take the bread out", "2026-11-21T12:00")
    assert await worker(app).run_once() == 1
    assert recorder.texts() == ["take the bread out"]
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.status == "done" and row.last_error is None


async def test_all_failing_shows_a_short_sentence_in_schedules(make_app, clock):
    app = await make_app()
    app.deps.messenger.add(UnreachableDiscord())
    app.deps.messenger.add(HtmlTelegram())
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "call the bank", "2026-11-21T12:00")
    w = worker(app)
    await w.run_once()
    for delay in (30, 120, 600, 1800):
        clock.advance(seconds=delay)
        assert await w.run_once() == 1
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.status == "failed"
    sentence = "Discord could not be reached; Telegram could not be reached"
    assert row.last_error.endswith(f"failed after 5 attempt(s): {sentence}")
    assert {run["error"] for run in await runs(app, s.id)} == {sentence}
    reply = await dispatch(CommandContext(user=user, assistant=app.assistant), "/schedules")
    assert sentence in reply.text
    for raw in ("<", "html", "Bad Gateway", "ClientDecodeError", "ClientConnectorError",
                "Cannot connect", "127.0.0.1", "deserialize"):
        assert raw not in reply.text


async def test_a_raising_messenger_without_a_name_is_a_front_end_failing(make_app, clock):
    app = await make_app()

    class Broken:
        async def send(self, user, text, *, link=None, key=None, offers=()):
            raise RuntimeError("<html><body>upstream said no</body></html>")

    app.deps.messenger.add(Broken())
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "feed the cat", "2026-11-21T12:00")
    await worker(app).run_once()
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.status == "active" and row.attempts == 1
    assert row.last_error == "A front end could not be reached"


async def test_an_unexpected_worker_error_is_stored_as_a_plain_sentence(make_app, clock):
    app = await make_app()

    class RawDelivery:  # a delivery that lets a library's exception through
        async def send(self, user, text, key=None, offers=()):
            raise ValueError("<html><body>502 Bad Gateway</body></html>")

    w = SchedulerWorker(app.deps.scheduler, RawDelivery(), clock=clock)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "feed the cat", "2026-11-21T12:00")
    assert await w.run_once() == 1
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.last_error == UNEXPECTED_ERROR
    [run] = await runs(app, s.id)
    assert run["status"] == "retry" and run["error"] == UNEXPECTED_ERROR
