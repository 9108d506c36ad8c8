"""Holes a co-user could use, closed (real PostgreSQL): the daily budget's day, /compact
within the budget, the /model choice re-checked, relays, advisory locks, the runtime dir."""

from __future__ import annotations

import json

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.agent.threads import update_thread
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import conversation, write_config

pytestmark = pytest.mark.timeout(90)


async def command(app, user, text, front_end="discord"):
    return await dispatch(CommandContext(user=user, assistant=app.assistant, front_end=front_end),
                          text)


# -- the daily budget: a UTC day that set_timezone cannot move; /compact within it --------------


async def test_changing_time_zone_does_not_start_a_fresh_budget_day(make_app, tmp_path):
    home = write_config(tmp_path / "h", daily_token_budget=60, context_window=0)
    model = ScriptedChatModel(default="a fairly long answer to use up the budget")
    app = await make_app(model=model, home=home)
    users = app.deps.users
    mallory = await users.ensure(901, "mallory", timezone="UTC")
    assert (await app.assistant.run_turn(mallory, "spend tokens " * 40)).ok
    refused = await app.assistant.run_turn(mallory, "more")
    assert "today's token budget" in refused.text and len(model.requests) == 1
    for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago"):  # today is tomorrow / yesterday
        mallory = await users.set_timezone(mallory.id, zone)
        again = await app.assistant.run_turn(mallory, "and now?")
        assert again.text.startswith("You have used today's token budget"), (zone, again.text)
        assert "resets at midnight UTC" in again.text
    assert len(model.requests) == 1  # no model call after the cap, whatever the zone


async def test_compact_is_refused_once_the_budget_is_spent(make_app, tmp_path):
    home = write_config(tmp_path / "h", daily_token_budget=60, context_window=0)
    model = ScriptedChatModel(default="a fairly long answer to use up the budget")
    app = await make_app(model=model, home=home)
    user = await app.deps.users.ensure(902, "pat", timezone="UTC")
    assert (await app.assistant.run_turn(user, "spend tokens " * 40)).ok
    await update_thread(app.assistant, user, {"messages": conversation(12)})
    calls = len(model.requests)
    model.add(json.dumps({"summary": "s", "memories": []}))
    reply = await command(app, user, "/compact")
    assert not reply.ok and "today's token budget" in reply.text
    assert len(model.requests) == calls  # the summariser was not called


# -- a stored /model choice is re-checked at every turn -----------------------------------------


async def test_a_stored_model_choice_no_longer_allowed_is_not_used(make_app, tmp_path):
    """Pat chose gpt-4o while it was allowed; the operator then narrowed allowed_models.
    Root chose o1 as an admin and was then removed from PANAGER_ADMIN_IDS. Both get the
    default model from the next turn on, and /model says so."""
    model = ScriptedChatModel(default="ok")
    home = write_config(tmp_path / "h", allowed_models=["gpt-4o-mini"])
    app = await make_app(model=model, home=home, openai_api_key="sk-test", admin_ids=[903])
    users = app.deps.users
    pat = await users.ensure(904, "pat")
    await users.set_model(pat.id, "gpt-4o")  # as /model did when gpt-4o was allowed
    root = await users.ensure(905, "root")
    await users.set_model(root.id, "o1")  # as /model did when 905 was an admin
    admin = await users.ensure(903, "boss")
    await users.set_model(admin.id, "o1")
    for user_id in (pat.id, root.id):
        user = await users.get(user_id)
        assert app.assistant.model_for(user) is model, user.model
        assert "gpt-4o-mini (the instance default" in (await command(app, user, "/model")).text
        assert (await app.assistant.run_turn(user, "hi")).text == "ok"  # the default answers
    chosen = app.assistant.model_for(await users.get(admin.id))
    assert chosen is not model and chosen.model_name == "o1"  # an admin keeps any choice
