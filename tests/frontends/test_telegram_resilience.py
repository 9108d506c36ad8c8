"""The Telegram front end rides out Telegram's bad moments: 5xx answers and HTML error pages.

Telegram (or a proxy in front of a local Bot API server) sometimes answers a
call with a JSON 500 or an nginx 502 page instead of the Bot API's JSON. The
poller must keep polling through that, startup calls must be retried or
skipped, and the log gets a short line now and then, never a traceback or the
token.
"""

from __future__ import annotations

import logging

import pytest

from tests.reliability.conftest import last_user_text
from tests.telegram_helpers import STEP, ask, running_front, telegram_settings

pytestmark = pytest.mark.timeout(120)

PERSON = 4242
BAD_GATEWAY = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


@pytest.fixture
def fake(telegram, openai):
    """The fake Bot API; the model echoes the last message."""
    openai.handler = lambda body: f"answer to: {last_user_text(body)}"
    return telegram


@pytest.fixture
async def app(make_app, openai, fake):
    return await make_app(
        openai_base_url=openai.base_url, openai_api_key="test", **telegram_settings(fake)
    )


def telegram_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("panager.frontends.telegram")]


def assert_short_clean_lines(caplog, token: str) -> None:
    """No traceback, no token and one line per record in what the front end logged."""
    for record in telegram_records(caplog):
        text = record.getMessage()
        assert record.exc_info is None and record.exc_text is None, text
        assert "\n" not in text and token not in text, text
    assert token not in caplog.text and "Traceback" not in caplog.text


def calls(fake, method: str) -> int:
    return [name for name, _ in fake.calls].count(method)


async def test_polling_survives_server_errors_and_html_pages(app, fake, caplog):
    caplog.set_level(logging.DEBUG, logger="panager")
    fake.fail_next("setMyCommands", 500)
    fake.fail_next("deleteWebhook", 502, page=BAD_GATEWAY)
    fake.fail_next("getUpdates", 500)
    fake.fail_next("getUpdates", 502, page=BAD_GATEWAY)
    fake.fail_next("getUpdates", 500)
    async with running_front(app, fake):
        assert await ask(fake, PERSON, "still listening?") == "answer to: still listening?"
        assert await ask(fake, PERSON, "and now?") == "answer to: and now?"
    assert calls(fake, "deleteWebhook") == 2  # retried after the 502 page
    assert calls(fake, "getUpdates") >= 5  # three failures, then polling as usual
    assert fake.commands == []  # the menu is a convenience: skipped, not retried
    messages = [r.getMessage() for r in telegram_records(caplog)]
    polls = [m for m in messages if m.startswith("getUpdates failed")]
    assert len(polls) == 3, messages
    assert "Internal Server Error" in polls[0] and "502 Bad Gateway" in polls[1]
    warned = [
        r for r in telegram_records(caplog)
        if r.levelno >= logging.WARNING and r.getMessage().startswith("getUpdates")
    ]
    assert len(warned) == 2  # attempts 1 and 2 warn, attempt 3 is a debug line
    assert "getUpdates works again after 3 failed attempts" in messages
    assert any(m.startswith("could not register the command menu") for m in messages)
    assert_short_clean_lines(caplog, fake.token)


async def test_webhook_is_set_after_a_bad_gateway_and_polling_replaces_a_refused_one(
    make_app, openai, fake, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="panager")
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("telegram_webhook: true\n")
    settings = {
        "openai_base_url": openai.base_url,
        "openai_api_key": "test",
        "public_url": "https://panager.example",
        **telegram_settings(fake),
    }
    fake.fail_next("setWebhook", 502, page=BAD_GATEWAY)
    async with running_front(await make_app(**settings), fake):
        assert fake.webhook is not None and calls(fake, "setWebhook") == 2
        assert fake.polls == 0
    fake.fail_next("setWebhook", 400, "Bad Request: bad webhook: Failed to resolve host")
    async with running_front(await make_app(**settings), fake):  # a restart, say
        await fake.wait_for(lambda: fake.polls > 0, STEP)
        assert fake.webhook is None and fake.polls > 0  # the old webhook was deleted
        assert await ask(fake, PERSON, "polling then?") == "answer to: polling then?"
    refused = [m for m in caplog.messages if m.startswith("Telegram refused the webhook")]
    assert len(refused) == 1 and "polling instead" in refused[0], caplog.messages
    assert_short_clean_lines(caplog, fake.token)
