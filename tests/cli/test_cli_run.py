"""`panager run`, `panager invite` and `panager users` as real processes.

`panager run` talks to the local FakeDiscord: the child process is started
through a tiny launcher that points discord.py's REST base and gateway at the
fake before handing over to the real `panager` entry point.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from panager.clock import SystemClock
from panager.db.pool import open_pool
from panager.frontends.discord.front_end import INTENT_MISSING
from panager.services.schedules.service import ScheduleService
from panager.services.users import UserService
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI

ADMIN = 4242
LAUNCHER = """
import os, sys, yarl
import discord.gateway, discord.http
discord.http.Route.BASE = os.environ["FAKE_DISCORD_REST"]
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(os.environ["FAKE_DISCORD_GATEWAY"])
from panager.cli.main import main
sys.argv[0] = "panager"
main()
"""


def env_for(db_url: str, home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PANAGER_"))}
    env.pop("DISCORD_TOKEN", None)
    env.update(DATABASE_URL=db_url, PANAGER_HOME=str(home), PANAGER_TIMEZONE="UTC", **extra)
    return env


async def spawn(args: list[str], env: dict, fake: FakeDiscord | None = None):
    if fake is not None:
        env = {**env, "FAKE_DISCORD_REST": fake.rest_base, "FAKE_DISCORD_GATEWAY": fake.gateway_url}
        command = [sys.executable, "-c", LAUNCHER, *args]
    else:
        command = [sys.executable, "-m", "panager.cli.main", *args]
    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def run_cli(args: list[str], env: dict, fake: FakeDiscord | None = None):
    proc = await spawn(args, env, fake)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_run_with_a_bad_token_exits_with_one_line(db_url, tmp_path):
    async with FakeDiscord(token="the-right-token") as fake:
        env = env_for(db_url, tmp_path, DISCORD_TOKEN="a-wrong-token")
        code, out, err = await run_cli(["run", "--components", "discord"], env, fake)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("panager: DISCORD_TOKEN was rejected by Discord; ")
    assert "a-wrong-token" not in out + err


async def test_run_without_a_token_or_with_unknown_components_is_one_line(db_url, tmp_path):
    env = env_for(db_url, tmp_path)
    code, _, err = await run_cli(["run"], env)
    assert code == 2 and err.strip().splitlines() == [err.strip()]
    assert err.startswith("panager: DISCORD_TOKEN is not set")
    code, _, err = await run_cli(["run", "--components", "discord,mail"], env)
    assert code == 2 and "--components 'discord,mail' is invalid" in err
    code, _, err = await run_cli(["run", "--components", "answers"], env)
    assert code == 2 and err.strip().splitlines() == [
        "panager: --components answers needs a chat front end's token (DISCORD_TOKEN or "
        "TELEGRAM_BOT_TOKEN): it answers the messages those front ends stored."
    ]


async def read_until(stream: asyncio.StreamReader, marker: str, seen: list[str]) -> str:
    """Read stderr lines until one contains `marker`; every line read lands in `seen`."""
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError("process ended early:\n" + "".join(seen))
        seen.append(line)
        if marker in line:
            return line


async def test_run_serves_all_components_and_stops_gracefully_on_sigterm(db_url, tmp_path):
    async with FakeDiscord(token="good-token") as fake, FakeOpenAI() as openai:
        openai.script("Hello from a real process.")
        env = env_for(
            db_url,
            tmp_path,
            DISCORD_TOKEN="good-token",
            PANAGER_ADMIN_IDS=str(ADMIN),
            PANAGER_HTTP_PORT="0",
            OPENAI_BASE_URL=openai.base_url,
            OPENAI_API_KEY="test",
        )
        proc = await spawn(["run"], env, fake)
        seen: list[str] = []
        try:
            running = await asyncio.wait_for(
                read_until(proc.stderr, "panager is running", seen), 60
            )
            assert "discord as panager" in running and "worker" in running
            url = running.split("web on ")[1].split()[0].rstrip(",")
            async with aiohttp.ClientSession() as session, session.get(url + "/healthz") as resp:
                assert resp.status == 200
            await fake.wait_until_ready(timeout=30)
            await fake.send_dm(ADMIN, "hello")
            (reply,) = await fake.wait_for_messages(ADMIN, 1, timeout=20)
            assert reply["content"] == "Hello from a real process."
            proc.send_signal(signal.SIGTERM)
            _, rest = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    log = "".join(seen) + rest.decode()
    assert proc.returncode == 0, log
    assert "panager stopped" in log and "Traceback" not in log


async def test_invite_and_users_commands(db_url, tmp_path):
    env = env_for(db_url, tmp_path, PANAGER_ADMIN_IDS=str(ADMIN))
    code, _, err = await run_cli(["invite", "create", "--expires", "soon"], env)
    assert code == 2 and err.startswith("panager: Invalid expiry 'soon'")
    created, allowed, blocked, admin = await asyncio.gather(
        run_cli(["invite", "create", "--uses", "3", "--expires", "12h"], env),
        run_cli(["users", "allow", "123456789012345678"], env),
        run_cli(["users", "block", "223456789012345678"], env),
        run_cli(["users", "block", str(ADMIN)], env),
    )
    assert created[0] == 0, created[2]
    invite, details = created[1].strip().splitlines()
    assert len(invite) == 10 and invite.isalnum() and invite.isupper()
    assert "3 of 3 uses" in details and f"/start {invite}" in details
    assert allowed[:2] == (0, "allowed 123456789012345678 (123456789012345678)\n")
    assert blocked[0] == 0 and blocked[1].startswith("blocked 223456789012345678")
    assert admin[0] == 2 and "PANAGER_ADMIN_IDS" in admin[2]
    assert len(admin[2].strip().splitlines()) == 1
    code, out, _ = await run_cli(["users", "list"], env)
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:-1]}
    assert rows["123456789012345678"][3] == "active"
    assert rows["223456789012345678"][3] == "blocked"
    assert out.strip().endswith("access mode: invite")


async def test_invite_create_refuses_an_expiry_too_far_ahead_in_one_line(db_url, tmp_path):
    env = env_for(db_url, tmp_path)
    results = await asyncio.gather(
        run_cli(["invite", "create", "--expires", "9999999999d"], env),
        run_cli(["invite", "create", "--expires", "1000000w"], env),
    )
    for code, out, err in results:
        assert code == 2 and out == "" and "Traceback" not in err, err
        assert err.startswith("panager: Expiry '") and "too long: at most 365 days" in err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["users", "allow", "abc"], ["users", "allow", "1"]])
async def test_users_commands_reject_bad_ids(db_url, tmp_path, args):
    code, out, err = await run_cli(args, env_for(db_url, tmp_path))
    assert code == 2 and "Traceback" not in out + err


async def test_worker_only_process_delivers_reminders_as_dms_over_rest(db_url, tmp_path):
    clock = SystemClock()
    pool = await open_pool(db_url, max_size=2)
    try:
        user = await UserService(pool).ensure(ADMIN, "admin")
        due = (clock.now() + timedelta(seconds=2)).isoformat(timespec="seconds")
        await ScheduleService(pool, clock).create(user, "water the plants", due)
    finally:
        await pool.close()
    async with FakeDiscord(token="good-token") as fake:
        fake.user(ADMIN, "admin")
        env = env_for(db_url, tmp_path, DISCORD_TOKEN="good-token")
        proc = await spawn(["run", "--components", "worker"], env, fake)
        try:
            (dm,) = await fake.wait_for_messages(ADMIN, 1, timeout=30)
            assert dm["content"].startswith("water the plants")
            assert fake.identifies == []  # REST only: no gateway connection
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, err.decode()


async def test_run_explains_a_missing_message_content_intent(db_url, tmp_path):
    async with FakeDiscord(token="good-token") as fake:
        env = env_for(db_url, tmp_path, DISCORD_TOKEN="good-token")
        proc = await spawn(["run", "--components", "discord"], env, fake)
        try:
            await fake.wait_until_ready(timeout=30)
            # what Discord does when the portal has not enabled a requested privileged intent
            await fake._gateway.ws.close(code=4014, message=b"Disallowed intent(s).")
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    errors = [line for line in err.decode().splitlines() if line.startswith("panager:")]
    assert proc.returncode == 2
    assert errors == [f"panager: {INTENT_MISSING}"]
    assert "Traceback" not in err.decode()
