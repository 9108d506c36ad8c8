"""`panager invite create` and `panager users list|allow|block`: access control from a shell.

These need only the database (no model, no Discord): they open the pool,
bring the schema up to date like the other commands, and act through
`AccessService`, the same code the bot's /invite and /start use.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import typer

from panager.config import ConfigError, Settings
from panager.services.access import (
    DEFAULT_INVITE_TTL,
    AccessError,
    AccessService,
    describe_invite,
    parse_duration,
)
from panager.services.telegram_updates import TelegramState

invite_app = typer.Typer(
    help="Invite codes for new users (PANAGER_ACCESS=invite).", no_args_is_help=True
)
users_app = typer.Typer(help="Who may use the assistant.", no_args_is_help=True)


@contextlib.asynccontextmanager
async def access_session(settings: Settings) -> AsyncIterator[AccessService]:
    """An AccessService on a short-lived pool (schema brought up to date first)."""
    from panager.clock import SystemClock
    from panager.db.pool import open_pool, resolve_database_url
    from panager.services.users import UserService

    url = resolve_database_url(settings)
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        await _ensure_schema(url, pool, settings.auto_migrate)
        users = UserService(pool, settings.timezone)
        yield AccessService(
            pool,
            users,
            SystemClock(),
            mode=settings.access,
            admin_ids=settings.admin_ids,
            telegram_admin_ids=settings.telegram_admin_ids,
            admin_identities=settings.admin_identities(),
        )
    finally:
        await pool.close()


async def _ensure_schema(url: str, pool, auto_migrate: bool) -> None:
    """Like the other commands: migrate when behind (without loading the agent stack)."""
    from panager.db import migrate

    if (await migrate.schema_status(url, pool)).up_to_date:
        return
    if not auto_migrate:
        raise ConfigError(
            "the database schema is behind this version (PANAGER_AUTO_MIGRATE=false); "
            "run: panager db upgrade"
        )
    await migrate.upgrade(url, pool)


def _run(action) -> None:
    """Load settings, run `action(access)` on the database; errors become one line."""
    from panager.cli.common import fail, run_async, settings_or_exit, setup_logging

    settings = settings_or_exit()
    setup_logging()

    async def go() -> None:
        async with access_session(settings) as access:
            await action(access)

    try:
        run_async(go)
    except AccessError as exc:
        fail(str(exc))


@invite_app.command("create")
def invite_create(
    uses: int = typer.Option(1, "--uses", min=1, help="how many people may use the code"),
    expires: str = typer.Option("7d", "--expires", help="validity: 30m, 12h, 7d, 2w or never"),
) -> None:
    """Print a new invite code; the new user sends the bot a DM: /start CODE."""
    expires_in = _checked(lambda: parse_duration(expires) if expires else DEFAULT_INVITE_TTL)

    async def action(access: AccessService) -> None:
        invite = await access.create_invite(None, max_uses=uses, expires_in=expires_in)
        typer.echo(invite.code)
        typer.echo(f"{describe_invite(invite)}; the new user DMs the bot: /start {invite.code}")
        link = await TelegramState(access.pool).invite_link(invite.code)
        if link:
            typer.echo(f"on Telegram they open: {link}")
        if access.mode != "invite":
            typer.echo(f"note: PANAGER_ACCESS is {access.mode!r}; codes only matter in 'invite'.")

    _run(action)


@users_app.command("list")
def users_list() -> None:
    """Show every user with role and status (pending = asked for access, not let in)."""

    async def action(access: AccessService) -> None:
        users = await access.users.list()
        if not users:
            typer.echo("no users yet")
            return
        typer.echo(f"{'ID':<20} {'USERNAME':<24} {'ROLE':<6} {'STATUS':<8} JOINED")
        for user in users:
            role = "admin" if await access.is_admin(user.id) else user.role
            typer.echo(
                f"{user.id:<20} {user.username[:24]:<24} {role:<6} {user.status:<8} "
                f"{user.created_at:%Y-%m-%d}"
            )
        typer.echo(f"access mode: {access.mode}")

    _run(action)


ID_HELP = "Discord user id, or telegram:ID for a Telegram user"


@users_app.command("allow")
def users_allow(user_id: str = typer.Argument(..., help=ID_HELP)) -> None:
    """Let a person in (also lifts a block): a Discord id, or telegram:ID."""

    platform, number = _checked(lambda: _check_id(user_id))

    async def action(access: AccessService) -> None:
        user = await access.allow(number, platform)
        typer.echo(f"allowed {user.id} ({user.username})")

    _run(action)


@users_app.command("block")
def users_block(user_id: str = typer.Argument(..., help=ID_HELP)) -> None:
    """Refuse a person from now on (their data is kept): a Discord id, or telegram:ID."""

    platform, number = _checked(lambda: _check_id(user_id))

    async def action(access: AccessService) -> None:
        user = await access.block(number, platform)
        typer.echo(f"blocked {user.id} ({user.username})")

    _run(action)


def _checked(parse):
    """Validate arguments before touching the database; a problem is one line."""
    from panager.cli.common import fail

    try:
        return parse()
    except AccessError as exc:
        fail(str(exc))


def _check_id(text: str) -> tuple[str, int]:
    """'123…' or 'discord:123…' → ('discord', 123…); 'telegram:42' → ('telegram', 42)."""
    platform, _, number = text.strip().rpartition(":")
    platform = platform.lower() or "discord"
    if platform == "telegram" and number.isdigit() and 0 < int(number) < 2**63:
        return platform, int(number)
    if platform == "discord" and number.isdigit() and 1 < int(number) < 2**63:
        return platform, int(number)
    if platform == "telegram":
        raise AccessError(
            f"{text} is not a Telegram user id (the person can ask @userinfobot for it)."
        )
    raise AccessError(
        f"{text} is not a Discord user id (Discord → Settings → Advanced → Developer "
        "Mode, then right-click the user → Copy User ID); Telegram ids are written telegram:ID."
    )


def register(cli: typer.Typer) -> None:
    """Attach `panager invite …` and `panager users …`."""
    cli.add_typer(invite_app, name="invite")
    cli.add_typer(users_app, name="users")
