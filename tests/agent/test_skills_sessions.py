"""Skills (/skills, /skill) and conversation files (/save, /load, /sessions)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from panager.agent.commands import CommandContext, dispatch
from panager.agent.turns.threads import thread_values, update_thread
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import conversation, pairs_intact, write_config


async def command(app, user, text):
    return await dispatch(CommandContext(user=user, assistant=app.assistant), text)


def install_skill(home, name: str, text: str):
    folder = home / "skills" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(text, encoding="utf-8")


async def test_skills_list_load_cap_and_skip_duplicates(make_app, tmp_path):
    home = tmp_path / "h"
    install_skill(home, "cooking", "---\ndescription: Recipes and timers\n---\nAlways give grams.")
    install_skill(home, "huge", "# Huge\n" + "é" * 4_000)  # 8 KB of UTF-8
    model = ScriptedChatModel(default="ok")
    app = await make_app(model=model, home=home)
    user = await app.local_user()
    listing = (await command(app, user, "/skills")).text
    assert "cooking — Recipes and timers" in listing and "huge" in listing
    assert "✓ cooking" not in listing
    assert "Loaded skill cooking" in (await command(app, user, "/skill cooking")).text
    assert "already loaded; skipped" in (await command(app, user, "/skill cooking")).text
    assert "✓ cooking" in (await command(app, user, "/skills")).text
    capped = (await command(app, user, "/skill huge")).text
    assert "only the first 4 KB were loaded" in capped
    assert (await thread_values(app.assistant, user))["loaded_skills"] == ["cooking", "huge"]
    await app.assistant.run_turn(user, "what should I cook?")
    system = model.requests[-1][0].content
    assert "## Skill: cooking\n" in system and "Always give grams." in system
    huge = system.split("## Skill: huge\n", 1)[1]
    assert huge.endswith("[skill truncated at 4 KB]")
    assert len(huge.encode()) <= 4_096 + len("\n[skill truncated at 4 KB]")


async def test_skill_traversal_and_unknown_names_are_refused(make_app, tmp_path):
    home = tmp_path / "h"
    install_skill(home, "ok", "fine")
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "SKILL.md").write_text("do bad things")
    (home / "skills" / "sneaky").symlink_to(secret, target_is_directory=True)
    app = await make_app(model=ScriptedChatModel(default="ok"), home=home)
    user = await app.local_user()
    for name in ("../outside", "..", "ok/../../outside", "/etc/passwd"):
        reply = await command(app, user, f"/skill {name}")
        assert not reply.ok and "Refused" in reply.text, name
    reply = await command(app, user, "/skill sneaky")
    assert not reply.ok and "outside the skills folder" in reply.text
    reply = await command(app, user, "/skill nope")
    assert not reply.ok and "No skill named 'nope'" in reply.text and "Available: ok" in reply.text
    assert not (await thread_values(app.assistant, user)).get("loaded_skills")
    assert "sneaky" not in (await command(app, user, "/skills")).text


async def test_skills_can_be_disabled(make_app, tmp_path):
    home = write_config(tmp_path / "h", skills=False)
    install_skill(home, "cooking", "Always give grams.")
    model = ScriptedChatModel(default="ok")
    app = await make_app(model=model, home=home)
    user = await app.local_user()
    assert "turned off" in (await command(app, user, "/skill cooking")).text
    assert "turned off" in (await command(app, user, "/skills")).text
    await update_thread(app.assistant, user, {"loaded_skills": ["cooking"]})
    await app.assistant.run_turn(user, "hi")
    assert "Always give grams." not in model.requests[-1][0].content


async def test_save_sessions_and_load_round_trip(make_app, tmp_path):
    home = tmp_path / "h"
    app = await make_app(model=ScriptedChatModel(default="ok"), home=home)
    user = await app.local_user()
    assert not (await command(app, user, "/save")).ok  # nothing to save yet
    await update_thread(app.assistant, user, {"messages": conversation(3), "summary": "Earlier."})
    saved = (await command(app, user, "/save ../../Trip Plans!")).text
    assert "Saved 12 messages as Trip-Plans" in saved and "name cleaned" in saved
    assert (home / "sessions" / str(user.id) / "Trip-Plans.jsonl").is_file()
    assert not list(tmp_path.glob("Trip*"))  # nothing written outside
    assert "Trip-Plans" in (await command(app, user, "/sessions")).text
    await command(app, user, "/clear")
    assert "Loaded Trip-Plans: 12 messages" in (await command(app, user, "/load Trip-Plans")).text
    values = await thread_values(app.assistant, user)
    messages = values["messages"]
    assert [type(m) for m in messages[:4]] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert values["summary"] == "Earlier." and pairs_intact(messages)
    assert messages[1].tool_calls[0]["args"] == {"n": 0}
    result = await app.assistant.run_turn(user, "continue")
    assert result.ok


async def test_load_of_a_malformed_file_reports_the_line(make_app, tmp_path):
    home = tmp_path / "h"
    app = await make_app(model=ScriptedChatModel(default="ok"), home=home)
    user = await app.local_user()
    await update_thread(app.assistant, user, {"messages": conversation(1)})
    folder = home / "sessions" / str(user.id)
    folder.mkdir(parents=True)
    (folder / "broken.jsonl").write_text(
        '{"type": "session", "version": 1}\n'
        '{"type": "message", "id": "1", "role": "user", "content": "hi"}\n'
        '{"type": "message", "id": "2", "role": "assistant", "content": \n'
    )
    (folder / "badrole.jsonl").write_text(
        '{"type": "session"}\n{"type": "message", "role": "wizard", "content": "x"}\n'
    )
    reply = await command(app, user, "/load broken")
    assert not reply.ok and "line 3: not valid JSON" in reply.text and "Nothing was changed" in reply.text
    reply = await command(app, user, "/load badrole")
    assert not reply.ok and "line 2:" in reply.text and "role" in reply.text
    assert "No saved conversation named missing" in (await command(app, user, "/load missing")).text
    assert len((await thread_values(app.assistant, user))["messages"]) == 4  # untouched
