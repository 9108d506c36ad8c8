"""Several processes on one bot: one polls (elected by an advisory lock), all may answer.

Two front ends on the same database stand for two `panager run` processes:
Telegram allows one `getUpdates` consumer per bot and answers a second with
409, which the fake enforces too.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiogram.exceptions import TelegramConflictError

from panager.frontends.telegram.api import close_bot, make_bot
from tests.reliability.conftest import last_user_text
from tests.telegram_helpers import STEP, ask, running_front, telegram_settings

pytestmark = pytest.mark.timeout(120)

PERSON = 4242




@pytest.fixture
def fake(telegram, openai):
    """The fake Bot API; the model echoes the last message."""
    openai.handler = lambda body: f"answer to: {last_user_text(body)}"
    return telegram


async def test_the_fake_refuses_a_second_poller_with_409(fake):
    first, second = make_bot(fake.token, fake.base_url), make_bot(fake.token, fake.base_url)
    try:
        held = asyncio.create_task(first.get_updates(timeout=2))
        await fake.wait_for(lambda: fake.polls == 1, STEP)
        with pytest.raises(TelegramConflictError):
            await second.get_updates(timeout=2)
        update = fake.dm(PERSON, "hi")
        (got,) = await held  # long polling: answered as soon as the update arrives
        assert got.update_id == update["update_id"]
        assert await first.get_updates(offset=got.update_id + 1, timeout=0) == []
        assert fake.confirmed == got.update_id  # the offset confirmed it
    finally:
        await close_bot(first)
        await close_bot(second)


async def test_two_processes_one_poller_messages_in_order(make_app, openai, fake):
    settings = {
        "openai_base_url": openai.base_url,
        "openai_api_key": "test",
        "access": "open",
        **telegram_settings(fake),
    }
    one, two = await make_app(**settings), await make_app(**settings)
    async with contextlib.AsyncExitStack() as stack:
        fronts = [await stack.enter_async_context(running_front(app, fake)) for app in (one, two)]
        await fake.wait_for(lambda: sum(f.leader.held.is_set() for f in fronts) == 1, STEP)
        for i in range(6):
            fake.dm(PERSON, f"message {i}")
        expected = [f"answer to: message {i}" for i in range(6)]
        await fake.wait_for(lambda: fake.shown_to(PERSON) == expected, STEP)
        assert fake.conflicts == 0  # never two getUpdates at once
        assert sum(f.polled > 0 for f in fronts) == 1
        leader = next(f for f in fronts if f.leader.held.is_set())
        follower = next(f for f in fronts if f is not leader)
        await leader.close()  # the poller goes away: the other takes over
        await fake.wait_for(lambda: follower.leader.held.is_set(), STEP)
        assert await ask(fake, PERSON, "still there?") == "answer to: still there?"
    asked = [last_user_text(body) for body in openai.requests]
    assert asked == [f"message {i}" for i in range(6)] + ["still there?"]


async def test_webhook_stores_an_update_only_with_the_secret(make_app, openai, fake, tmp_path):
    import aiohttp

    from panager.frontends.web.server import start_web
    from panager.frontends.web.telegram_hook import SECRET_HEADER, TELEGRAM_HOOK_PATH

    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("telegram_webhook: true\n")
    app = await make_app(
        openai_base_url=openai.base_url,
        openai_api_key="test",
        access="open",
        public_url="https://panager.example",
        http_port=0,
        **telegram_settings(fake),
    )
    server = await start_web(app)
    url = server.url + TELEGRAM_HOOK_PATH
    try:
        async with running_front(app, fake), aiohttp.ClientSession() as http:
            hook = fake.webhook
            assert (
                hook is not None and hook["url"] == "https://panager.example" + TELEGRAM_HOOK_PATH
            )
            secret = hook["secret_token"]
            assert len(secret) >= 32 and fake.token not in hook["url"]
            update = fake.dm(PERSON, "via webhook")
            fake.updates.clear()  # delivered by the webhook, not by getUpdates
            for headers in ({}, {SECRET_HEADER: "x" * 43}, {SECRET_HEADER: secret[:-1] + "?"}):
                async with http.post(url, json=update, headers=headers) as response:
                    assert response.status == 403
            assert await stored(app) == 0
            for _ in range(2):  # Telegram retrying: stored once
                async with http.post(url, json=update, headers={SECRET_HEADER: secret}) as response:
                    assert response.status == 200
            assert await stored(app) == 1
            await fake.wait_for(lambda: fake.shown_to(PERSON) == ["answer to: via webhook"], STEP)
            assert fake.polls == 0  # no getUpdates while the webhook is set
    finally:
        await server.stop()
    assert len(openai.requests) == 1


async def stored(app) -> int:
    async with app.pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) AS n FROM telegram_inbox")).fetchone()
    return row["n"]


async def test_a_receiver_stores_and_answer_workers_answer_in_order(
    make_app, openai, fake, tmp_path
):
    from panager.frontends.telegram.bot import TelegramFrontEnd

    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("receiver_answers: false\n")
    settings = {
        "openai_base_url": openai.base_url,
        "openai_api_key": "test",
        "access": "open",
        **telegram_settings(fake),
    }
    receiving, *answering = [await make_app(**settings) for _ in range(3)]
    workers = [TelegramFrontEnd(app, poll_interval=0.05) for app in answering]
    async with running_front(receiving, fake) as receiver:
        try:
            for worker in workers:
                await worker.start_answering()
            people = (PERSON, PERSON + 1)
            for i in range(4):
                for person in people:
                    fake.dm(person, f"{person} message {i}")
            for person in people:
                expected = [f"answer to: {person} message {i}" for i in range(4)]
                await fake.wait_for(lambda p=person, e=expected: fake.shown_to(p) == e, STEP)
            assert fake.polls > 0 and all(w.polled == 0 for w in workers)  # one poller
            async with receiving.pool.connection() as conn:
                rows = await (
                    await conn.execute("SELECT status, claimed_by FROM telegram_inbox")
                ).fetchall()
        finally:
            for worker in workers:
                await worker.close()
    assert len(rows) == 8
    assert {r["claimed_by"] for r in rows} <= {w.inbox.worker for w in workers}
    assert receiver.inbox.worker not in {r["claimed_by"] for r in rows}
