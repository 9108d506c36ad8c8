"""The terminal front end end-to-end: `panager chat`/`ask`/`db`/`doctor` as real processes.

The model API is the local fake OpenAI server; the database is the test's own
real PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from pathlib import Path

import pytest

from tests.fakes.openai_server import tool_call

PANAGER = [sys.executable, "-m", "panager.cli.main"]


def cli_env(db_url: str, home: Path, base_url: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PANAGER_"))}
    env.update({"DATABASE_URL": db_url, "PANAGER_HOME": str(home), "PANAGER_TIMEZONE": "UTC"})
    env.pop("DISCORD_TOKEN", None)
    if base_url:
        env.update({"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "test"})
    return env


async def run_cli(
    args: list[str], env: dict, stdin: str = "", timeout: float = 60
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *PANAGER,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout)
    return proc.returncode, out.decode(), err.decode()


async def test_chat_answers_and_continues_after_restart(db_url, tmp_path, openai):
    env = cli_env(db_url, tmp_path, openai.base_url)
    openai.script("Nice to meet you, Mina.")
    code, out, err = await run_cli(["chat"], env, "hello, I am Mina\nexit\n")
    assert code == 0, err
    assert "panager › Nice to meet you, Mina." in out
    assert "Traceback" not in out + err
    # a second process continues the same conversation, read back from Postgres
    openai.script("You told me you are Mina.")
    code, out, _ = await run_cli(["chat"], env, "who am I?\n/q\n")
    assert code == 0 and "You told me you are Mina." in out
    texts = str(openai.requests[-1]["messages"])
    assert "hello, I am Mina" in texts and "Nice to meet you, Mina." in texts
    # /clear starts over: the next request no longer carries the old messages
    openai.script("Hello again.")
    code, out, _ = await run_cli(["chat"], env, "/clear\nhi\n")
    assert "Started a new conversation" in out and "Hello again." in out
    assert "hello, I am Mina" not in str(openai.requests[-1]["messages"])


async def test_chat_tool_round_trip_and_multiline(db_url, tmp_path, openai):
    env = cli_env(db_url, tmp_path, openai.base_url)
    openai.script(
        tool_call("set_timezone", {"timezone": "Asia/Seoul"}), "Done — you're on Seoul time."
    )
    code, out, err = await run_cli(["chat"], env, "I moved to \\\nSeoul\n")
    assert code == 0, err
    assert "setting the time zone" in out and "Done — you're on Seoul time." in out
    first = openai.requests[0]["messages"]
    assert first[-1] == {"role": "user", "content": "I moved to \nSeoul"}
    tool_result = [m for m in openai.requests[1]["messages"] if m["role"] == "tool"]
    assert '"timezone":"Asia/Seoul"' in tool_result[0]["content"]
    code, out, err = await run_cli(["chat"], env, "/timezone\n")
    assert code == 0, err
    assert "Your time zone is Asia/Seoul" in out


async def test_chat_paste_mode_and_commands_use_no_model(db_url, tmp_path, openai):
    env = cli_env(db_url, tmp_path, openai.base_url)
    openai.script("got it")
    stdin = "/help\n/nonsense\n/timezone Mars/Base\n/paste\nline one\n  line two\\\n/submit\nquit\n"
    code, out, err = await run_cli(["chat"], env, stdin)
    assert code == 0, err
    assert "/timezone" in out and "Unknown command /nonsense" in out and "Unknown time zone" in out
    assert len(openai.requests) == 1
    assert openai.requests[0]["messages"][-1]["content"] == "line one\n  line two\\"


async def test_chat_without_model_still_starts(db_url, tmp_path):
    env = cli_env(db_url, tmp_path)
    code, out, err = await run_cli(["chat"], env, "/timezone\nhello\n")
    assert code == 0, err
    assert "Your time zone is UTC" in out
    assert "No model is configured. Set OPENAI_API_KEY" in out


@pytest.mark.timing
async def test_ask_exit_codes(db_url, tmp_path, openai):
    env = cli_env(db_url, tmp_path, openai.base_url)
    openai.script("42")
    code, out, _ = await run_cli(["ask", "what", "is", "the", "answer"], env)
    assert code == 0 and out.strip() == "42"
    openai.fail_for(math.inf, 500)  # until the test ends: however long the process takes
    code, out, err = await run_cli(["ask", "again"], env)
    assert code == 1 and "not answering" in out and "Traceback" not in out + err


async def test_bad_config_is_one_line(db_url, tmp_path):
    env = cli_env(db_url, tmp_path)
    env["PANAGER_ACCESS"] = "everyone"
    code, _out, err = await run_cli(["chat"], env)
    assert code == 2
    assert (
        err.strip().startswith("panager: PANAGER_ACCESS is invalid")
        and len(err.strip().splitlines()) == 1
    )


async def test_db_status_and_doctor(fresh_db, tmp_path, openai):
    env = cli_env(fresh_db(), tmp_path, openai.base_url)
    code, out, _ = await run_cli(["db", "status"], env)
    assert code == 1 and "behind" in out
    code, out, _ = await run_cli(["db", "upgrade"], env)
    assert code == 0 and "(head)" in out
    code, out, _ = await run_cli(["db", "status"], env)
    assert code == 0 and "up to date" in out
    openai.script(tool_call("ping_tool", {}))
    code, out, _ = await run_cli(["doctor"], env)
    assert code == 0, out
    names = ("config", "database", "pgvector", "privileges", "migrations", "model", "window",
             "extractors")
    for name in names:
        assert any(line.startswith("OK") and name in line for line in out.splitlines()), (name, out)
    assert "gpt-4o-mini gets images (by its name)" in out
    assert f"whisper-1 at {openai.base_url} (/v1/audio/transcriptions)" in out
    (tmp_path / "config.yaml").write_text("vision: {gpt-4o-mini: false}\n")
    openai.script(tool_call("ping_tool", {}))
    code, out, _ = await run_cli(["doctor"], env)
    assert "gpt-4o-mini does not get images (by the `vision` setting)" in out
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    code, out, _ = await run_cli(["doctor"], env)
    assert code == 1 and any(x.startswith("FAIL") and "model" in x for x in out.splitlines())


async def test_doctor_names_an_extractor_that_does_not_import(monkeypatch):
    from panager import doctor

    assert await doctor.check_extractors(None, {}) == (
        True, f"{len(doctor.EXTRACTORS)} modules import; a small web page is read")
    monkeypatch.setattr(doctor, "EXTRACTORS", [*doctor.EXTRACTORS, ("no_such_decoder", "tests")])
    ok, detail = await doctor.check_extractors(None, {})
    assert ok is False and "no_such_decoder (tests): ModuleNotFoundError" in detail


async def test_auto_migrate_off_requires_upgrade(fresh_db, tmp_path):
    env = cli_env(fresh_db(), tmp_path)
    env["PANAGER_AUTO_MIGRATE"] = "false"
    code, _, err = await run_cli(["ask", "hi"], env)
    assert code == 2 and "panager db upgrade" in err


async def test_chat_debug_prints_the_state_after_each_turn(db_url, tmp_path, openai):
    env = cli_env(db_url, tmp_path, openai.base_url)
    openai.script("first", "second")
    code, out, err = await run_cli(["chat", "--debug"], env, "one\ntwo\n")
    assert code == 0, err
    snapshots = [line for line in out.splitlines() if line.startswith("debug ")]
    assert len(snapshots) == 2
    assert '"messages": 2' in out and '"messages": 4' in out


async def test_ask_streams_plain_text_and_json_reports_tools_and_usage(db_url, tmp_path, openai):
    env = cli_env(db_url, tmp_path, openai.base_url)
    openai.script("Here is **bold** text\n\n```\ncode\n```")
    code, out, err = await run_cli(["ask", "show", "me"], env)
    assert code == 0, err
    assert out == "Here is **bold** text\n\n```\ncode\n```\n"  # as written: no escapes
    assert openai.requests[-1]["stream"] is True
    openai.script(tool_call("set_timezone", {"timezone": "Asia/Seoul"}), "Done.")
    code, out, err = await run_cli(["ask", "--json", "I live in Seoul"], env)
    assert code == 0, err
    body = json.loads(out)
    assert body["answer"] == "Done." and body["ok"] is True and body["link"] is None
    assert body["tool_calls"] == [
        {"name": "set_timezone", "args": {"timezone": "Asia/Seoul"}, "status": "success"}
    ]
    assert body["usage"]["total_tokens"] > 0
    assert body["usage"]["total_tokens"] == body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
