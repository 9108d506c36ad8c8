"""/model and /help for the runtime commands."""

from __future__ import annotations

from panager.agent.commands import CommandContext, dispatch
from tests.fakes.scripted_model import ScriptedChatModel


async def command(app, user, text):
    return await dispatch(CommandContext(user=user, assistant=app.assistant), text)


async def test_model_shows_sets_and_resets_the_users_model(make_app):
    app = await make_app(model=ScriptedChatModel(default="ok"))
    user = await app.local_user()
    shown = (await command(app, user, "/model")).text
    assert "gpt-4o-mini (the instance default; context window 128,000 tokens, built-in" in shown
    refused = await command(app, user, "/model llama3.1:8b")  # not in allowed_models
    assert not refused.ok and "Models you can choose: gpt-4o-mini" in refused.text
    assert (await app.deps.users.get(user.id)).model is None
    app.deps.config.allowed_models = ["gpt-4o-mini", "llama3.1:8b"]
    assert "Model set to llama3.1:8b" in (await command(app, user, "/model llama3.1:8b")).text
    user = await app.deps.users.get(user.id)
    assert user.model == "llama3.1:8b"
    assert "llama3.1:8b (your choice" in (await command(app, user, "/model")).text
    bad = await command(app, user, "/model rm -rf /")
    assert not bad.ok and "does not look like a model name" in bad.text
    assert "Back to the instance default" in (await command(app, user, "/model default")).text
    assert (await app.deps.users.get(user.id)).model is None


async def test_help_lists_the_runtime_commands(make_app):
    app = await make_app(model=ScriptedChatModel())
    user = await app.local_user()
    text = (await command(app, user, "/help")).text
    for usage in ("/usage", "/model [name|default]", "/debug", "/compact", "/skills",
                  "/skill NAME", "/sessions", "/save [name]", "/load NAME"):
        assert usage in text, usage


async def test_help_columns_line_up_in_the_terminal(make_app):
    app = await make_app(model=ScriptedChatModel())
    user = await app.local_user()
    text = (await command(app, user, "/help")).text
    rows = [line for line in text.splitlines() if line.startswith("  ")]
    assert any(r.lstrip().startswith("exit, quit, /q") for r in rows)
    starts = set()
    for row in rows:
        usage_end = row.index("  ", 2)  # the usage column ends at the first double space
        starts.add(len(row) - len(row[usage_end:].lstrip()))
    assert len(starts) == 1, rows  # every description starts in the same column


async def test_a_command_that_fails_answers_a_sentence_and_logs_the_rest(make_app, caplog,
                                                                        monkeypatch):
    """A command handler's unexpected error never reaches the person as a traceback (the
    terminal chat used to exit on one): one sentence, the details in the log."""
    import logging

    from panager.agent.commands import REGISTRY, Command

    async def broken(ctx, args):
        raise OverflowError("date value out of range: secret-ish detail")

    monkeypatch.setitem(REGISTRY, "broken", Command("broken", broken, "/broken", "fails",
                                                    False, ("terminal", "web")))
    app = await make_app()
    user = await app.local_user()
    caplog.set_level(logging.ERROR)
    reply = await dispatch(CommandContext(user=user, assistant=app.assistant), "/broken now")
    assert not reply.ok and reply.text.startswith("Sorry, /broken failed on my side")
    assert "out of range" not in reply.text and "Traceback" not in reply.text
    assert "OverflowError" in caplog.text
    assert (await dispatch(CommandContext(user=user, assistant=app.assistant), "/help")).ok
