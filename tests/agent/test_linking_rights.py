"""Admin rights and MCP access follow identities, in every process: after a listed
identity leaves by /unlink, a second app on the same database (as after a restart, or a
separate `web` component) gives the person left behind nothing of the admin's, and gives
it to the person the listed identity moved to."""

from __future__ import annotations

from panager.agent.commands import CommandContext, dispatch
from panager.agent.tools import all_tools
from panager.frontends.web.server import start_web
from panager.services.access import AccessService
from panager.services.mcp.connection import Backoff
from tests.agent.test_linking_join import code_in
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import write_config
from tests.services.test_mcp import names, stdio_server, wait_ready
from tests.web_helpers import WebHarness

DISCORD_ID = 111_000_000_000_000_041
TELEGRAM_ID = 222_041
LONG_ANSWER = "a fairly long answer to use up the budget"


async def started(make_app, tmp_path, **settings):
    """An app on the test's database, with three MCP servers (admins only, a Discord id,
    a Telegram id) and a small daily token budget; one of them is "another process"."""
    write_config(
        tmp_path / "home",
        daily_token_budget=60,
        context_window=0,
        mcp_servers={
            "ops": stdio_server(users="admins", tools=["echo"]),
            "mine": stdio_server(users=[DISCORD_ID], tools=["echo"]),
            "tg": stdio_server(users=[f"telegram:{TELEGRAM_ID}"], tools=["echo"]),
        },
    )
    app = await make_app(ScriptedChatModel(default=LONG_ANSWER), access="invite", **settings)
    for connection in app.deps.mcp.connections.values():
        connection.backoff = Backoff(first=0.05, cap=0.2)
        await wait_ready(connection)
        await app.deps.mcp.approve(connection.name, "test")  # the operator approved them
    await app.deps.mcp.refresh()
    return app


async def command(app, identity, text: str):
    person = await app.deps.users.person_id(*identity)
    user = await app.deps.users.get(person)
    ctx = CommandContext(
        user=user, assistant=app.assistant, front_end=identity[0], identity=identity
    )
    return await dispatch(ctx, text)


async def join_then_unlink(app, issuer, claimant) -> None:
    """`issuer` joins `claimant`, then `/unlink`s itself (the listed identity) away."""
    code = code_in((await command(app, issuer, "/link")).text)
    assert "Code accepted" in (await command(app, claimant, f"/link {code}")).text
    assert "Confirmed" in (await command(app, claimant, "/link confirm")).text
    assert (await command(app, issuer, "/link approve")).text.startswith("Joined")
    assert (await command(app, issuer, "/unlink")).text.startswith("Unlinked")


async def admin_page_status(app, user_id: int) -> int:
    server = await start_web(app)
    client = await WebHarness(app, server, None, None).client(user_id)
    try:
        return (await client.get("/admin/users"))[0]
    finally:
        await client.close()
        await server.stop()


async def test_the_terminals_rights_stay_with_the_terminal_in_a_new_process(make_app, tmp_path):
    first = await started(make_app, tmp_path, http_port=0)
    await first.local_user()
    await first.deps.users.ensure_identity("telegram", TELEGRAM_ID, "me_tg")
    await join_then_unlink(first, ("terminal", 1), ("telegram", TELEGRAM_ID))

    second = await started(make_app, tmp_path, http_port=0)  # a restart, or `web` alone
    users, access = second.deps.users, second.deps.access
    rest = await users.get(1)
    terminal = await users.get(await users.person_id("terminal", 1))
    assert await users.identities(1) == [("telegram", TELEGRAM_ID)] and terminal.id != 1
    assert await admin_page_status(second, rest.id) == 403
    assert await admin_page_status(second, terminal.id) == 200
    refused = await command(second, ("telegram", TELEGRAM_ID), "/invite")
    assert not refused.ok and "admins only" in refused.text
    assert (await command(second, ("terminal", 1), "/invite")).ok
    fresh = AccessService(second.pool, users, second.clock, mode="invite")
    assert not await fresh.has_admin_rights(rest.id) and await fresh.has_admin_rights(terminal.id)

    # The admins' server goes with the terminal; the one listing the Telegram id is the
    # Telegram person's (the terminal, "local", is not on its list).
    assert names(await all_tools(second.deps, rest)) & {"mcp__ops__echo", "mcp__tg__echo"} == {
        "mcp__tg__echo"
    }
    held = names(await all_tools(second.deps, terminal))
    assert "mcp__ops__echo" in held and "mcp__tg__echo" not in held
    admitted = await access.admit_identity("telegram", TELEGRAM_ID, "me_tg")
    assert admitted.allowed and admitted.user.role == "user"


async def test_a_listed_discord_admins_rights_leave_with_discord_in_a_new_process(
    make_app, tmp_path
):
    first = await started(make_app, tmp_path, admin_ids=[DISCORD_ID], http_port=0)
    await first.deps.access.admit_identity("discord", DISCORD_ID, "boss")
    await first.deps.users.ensure_identity("telegram", TELEGRAM_ID, "boss_tg")
    await join_then_unlink(first, ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID))

    second = await started(make_app, tmp_path, admin_ids=[DISCORD_ID], http_port=0)
    users, access = second.deps.users, second.deps.access
    rest = await users.get(DISCORD_ID)  # the remainder kept the id; it holds Telegram now
    moved = await users.get(await users.person_id("discord", DISCORD_ID))
    assert await users.identities(rest.id) == [("telegram", TELEGRAM_ID)]
    # Nobody wrote to this process yet: what it decides comes from the database alone.
    assert await admin_page_status(second, rest.id) == 403
    assert await admin_page_status(second, moved.id) == 200
    refused = await command(second, ("telegram", TELEGRAM_ID), "/invite")
    assert not refused.ok and "admins only" in refused.text
    assert (await command(second, ("discord", DISCORD_ID), "/invite")).ok
    assert not await access.is_admin(rest.id) and await access.is_admin(moved.id)

    # `users: [DISCORD_ID]` and `users: admins` follow the Discord identity to its new
    # person; the Telegram server stays with the Telegram identity.
    kept = names(await all_tools(second.deps, rest))
    assert {"mcp__ops__echo", "mcp__mine__echo"}.isdisjoint(kept) and "mcp__tg__echo" in kept
    gained = names(await all_tools(second.deps, moved))
    assert {"mcp__ops__echo", "mcp__mine__echo"} <= gained and "mcp__tg__echo" not in gained

    # The budget exemption went with the listed identity too.
    for who in (rest, moved):
        await second.assistant.run_turn(who, "spend tokens " * 40)
    assert "today's token budget" in (await second.assistant.run_turn(rest, "more")).text
    assert (await second.assistant.run_turn(moved, "more")).text == LONG_ANSWER

    on_telegram = await access.admit_identity("telegram", TELEGRAM_ID, "boss_tg")
    on_discord = await access.admit_identity("discord", DISCORD_ID, "boss")
    assert (on_telegram.user.role, on_discord.user.role) == ("user", "admin")
