"""Webhooks: a signing secret (HMAC over timestamp + body, ±5 min, a signature used once),
unsigned hooks refusing a body repeated within 10 minutes, and a per-hook daily token budget
that admins' hooks count toward too. Real PostgreSQL, the real web server, a fake clock."""

from __future__ import annotations

import json

import pytest

from panager.services.accounts.sealing import Sealer
from panager.services.schedules.system import call_signature
from tests.agent.test_system_jobs import command, hook_app, post
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import write_config
from tests.scheduler_helpers import worker

pytestmark = pytest.mark.timeout(90)


async def _created(app, user, name: str, instruction: str, signed: bool = False):
    """(token, signing secret) of a new hook, as the web page shows them once."""
    hook, token = await app.deps.system_jobs.create_webhook(user, name, instruction,
                                                            signed=signed)
    return token, hook.signing_secret


KEY = "webhook-test-key-1"


async def test_a_signed_hook_takes_each_fresh_signature_once(make_app, clock):
    app, _, server = await hook_app(make_app, ScriptedChatModel(default="Noted."), secret_key=KEY)
    user = await app.local_user()
    token, secret = await _created(app, user, "bank", "Note it.", signed=True)
    assert secret and "(signed)" in await command(app, user, "/webhook")
    async with app.pool.connection() as conn:  # at rest: sealed with PANAGER_SECRET_KEY
        row = await (await conn.execute("SELECT signing_secret FROM webhooks")).fetchone()
    stored = row["signing_secret"]
    assert secret not in stored and Sealer(KEY).open(stored) == secret
    url, body = server.url + "/hooks/" + token, json.dumps({"paid": 12}).encode()
    stamp = str(int(clock.now().timestamp()))
    good = {"X-Panager-Timestamp": stamp,
            "X-Panager-Signature": call_signature(secret, stamp, body)}
    assert (await post(url, body))[0] == 401  # unsigned
    assert (await post(url, body, **{**good, "X-Panager-Signature": "0" * 64}))[0] == 401
    assert (await post(url, body + b" ", **good))[0] == 401  # the body was changed
    assert (await post(url, body, **good))[0] == 202
    status, said = await post(url, body, **good)  # replayed as it was
    assert status == 409 and "already used" in said["error"]
    old = str(int(clock.now().timestamp()) - 6 * 60)
    late = {"X-Panager-Timestamp": old, "X-Panager-Signature": call_signature(secret, old, body)}
    status, said = await post(url, body, **late)
    assert status == 401 and "5 minutes" in said["error"]
    assert await worker(app).run_once() == 1  # exactly the one accepted call ran
    await server.stop()


async def test_an_unsigned_hook_refuses_the_same_body_for_ten_minutes(make_app, clock):
    app, _, server = await hook_app(make_app, ScriptedChatModel(default="Noted."))
    user = await app.local_user()
    token, secret = await _created(app, user, "door", "Who rang?")
    assert secret is None
    url = server.url + "/hooks/" + token
    assert (await post(url, '{"ring": 1}'))[0] == 202
    status, said = await post(url, '{"ring": 1}')
    assert status == 409 and "10 minutes" in said["error"]
    assert (await post(url, '{"ring": 2}'))[0] == 202
    clock.advance(minutes=10, seconds=1)
    assert (await post(url, '{"ring": 1}'))[0] == 202
    await server.stop()


async def test_an_admins_hook_has_a_daily_token_budget(make_app, clock, tmp_path):
    model = ScriptedChatModel(default="Noted the reading.")
    home = write_config(tmp_path / "h", webhook_daily_tokens=60)
    app, rec, server = await hook_app_with(make_app, model, home)
    admin = await app.deps.users.ensure(9001, "root", role="admin")
    _, token = await app.deps.system_jobs.create_webhook(admin, "sensor", "Log the reading.")
    url = server.url + "/hooks/" + token
    for n in range(3):
        assert (await post(url, json.dumps({"reading": n})))[0] == 202
        assert await worker(app).run_once() == 1
    assert len(model.requests) == 1  # the first call used the hook's tokens for the day
    notices = rec.texts(admin.id)
    assert notices[0] == "Noted the reading." and len(notices) == 2
    assert "used its 60 tokens for today" in notices[1]  # told once, not at every call
    clock.advance(days=1)
    assert (await post(url, json.dumps({"reading": 9})))[0] == 202
    assert await worker(app).run_once() == 1 and len(model.requests) == 2
    await server.stop()


async def hook_app_with(make_app, model, home):
    from panager.frontends.web.server import start_web
    from tests.scheduler_helpers import scheduler_app

    app, rec = await scheduler_app(make_app, model=model, http_port=0, home=home,
                                   admin_ids=[9001])
    return app, rec, await start_web(app)


async def test_a_signed_hook_needs_the_secret_key_and_refuses_calls_when_it_changed(
    make_app, clock, caplog
):
    """Without PANAGER_SECRET_KEY `--signed` is refused in one sentence and nothing is stored;
    a hook whose sealed secret does not open with the key the server now has (changed
    without `panager restore --new-key`) refuses every call (503) instead of taking it
    unsigned, and says why in the log."""
    app, _, server = await hook_app(make_app, ScriptedChatModel(default="Noted."))
    user = await app.local_user()
    said = await command(app, user, "/webhook new bank --signed Note it.")
    assert "needs PANAGER_SECRET_KEY" in said and "/hooks/" not in said
    assert "bank" not in await command(app, user, "/webhook")
    await server.stop()

    app, _, server = await hook_app(make_app, ScriptedChatModel(default="Noted."), secret_key=KEY)
    user = await app.local_user()
    token, secret = await _created(app, user, "bank", "Note it.", signed=True)
    await server.stop()
    other, _, server = await hook_app(make_app, ScriptedChatModel(default="Noted."),
                                      secret_key="another-key")
    url, body = server.url + "/hooks/" + token, b"{}"
    stamp = str(int(clock.now().timestamp()))
    good = {"X-Panager-Timestamp": stamp, "X-Panager-Signature": call_signature(secret, stamp, body)}
    assert (await post(url, body, **good))[0] == 503
    assert (await post(url, body))[0] == 503  # never taken unsigned
    assert await worker(other).run_once() == 0
    assert "does not open with PANAGER_SECRET_KEY" in caplog.text and secret not in caplog.text
    await server.stop()
