"""Running the Telegram front end against FakeTelegram in tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from panager.frontends.telegram.bot import TelegramFrontEnd
from tests.fakes.telegram_server import FakeTelegram

STEP = 15  # seconds: the bound for any single wait


def telegram_settings(fake: FakeTelegram) -> dict:
    """Settings overrides that point a test App at the fake."""
    return {"telegram_bot_token": fake.token, "telegram_api_url": fake.base_url}


@contextlib.asynccontextmanager
async def running_front(app, fake: FakeTelegram, **options) -> AsyncIterator[TelegramFrontEnd]:
    """A started front end (polling the fake), closed cleanly afterwards."""
    options.setdefault("poll_timeout", 1)
    options.setdefault("poll_interval", 0.05)
    front = TelegramFrontEnd(app, **options)
    await front.start()
    try:
        await fake.wait_for(lambda: fake.polls > 0 or fake.webhook is not None, STEP)
        yield front
    finally:
        await front.close()
    assert not front.queue._background, "the front end left tasks running after close()"


async def ask(fake: FakeTelegram, user_id: int, text: str) -> str:
    """Send a DM and return the first message the bot sends that person after it."""
    before = len(fake.messages_to(user_id))
    fake.dm(user_id, text)
    await fake.wait_for(lambda: len(fake.messages_to(user_id)) > before, STEP)
    return fake.messages_to(user_id)[before]["text"]
