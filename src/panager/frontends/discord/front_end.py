"""The Discord front end as `panager run` starts it (frontends/shared/front_end.py).

The token is checked over REST before the database starts; a process without
the bot still delivers to Discord people (reminders, answers replayed after a
link) through a client logged in over REST only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from panager.config import ConfigError
from panager.frontends.shared.front_end import Running
from panager.platforms import DISCORD

if TYPE_CHECKING:
    from panager.app import App
    from panager.config import Settings

log = logging.getLogger("panager.run")

TOKEN_REJECTED = (
    "DISCORD_TOKEN was rejected by Discord; copy a new token from the Developer Portal "
    "(your application → Bot → Reset Token) into DISCORD_TOKEN."
)
TOKEN_MISSING = (
    "DISCORD_TOKEN is not set; create a bot (see docs/discord.md) and set DISCORD_TOKEN, "
    "or leave discord out: --components worker,web."
)
INTENT_MISSING = (
    "Discord refused the Message Content intent; enable it in the Developer Portal "
    "(your application → Bot → Privileged Gateway Intents → Message Content Intent) and restart."
)


async def rest_client(token: str) -> Any:  # Any: discord.Client, imported only when used
    """A discord.py client logged in over REST only (no gateway); errors become one line."""
    import discord

    from panager.frontends.discord.bot import patch_discord_py

    patch_discord_py()
    client = discord.Client(intents=discord.Intents(guilds=True))
    await logged_in(client, token)
    return client


async def logged_in(client: Any, token: str) -> None:
    """Log `client` in; a rejected token or an unreachable Discord closes it and becomes
    one line (ConfigError)."""
    import aiohttp
    import discord

    try:
        await client.login(token)
    except discord.LoginFailure:
        await client.close()
        raise ConfigError(TOKEN_REJECTED) from None
    except (aiohttp.ClientError, OSError) as exc:
        await client.close()
        raise ConfigError(f"cannot reach Discord ({exc}); check the network.") from None


class DiscordEntry:
    """Discord: the bot with its gateway, or REST delivery only."""

    platform = DISCORD

    def configured(self, settings: Settings) -> bool:
        """Runs by default when DISCORD_TOKEN is set."""
        return bool(settings.discord_token)

    def settings_problem(self, settings: Settings, *, chosen: bool) -> str | None:
        """The bot needs DISCORD_TOKEN."""
        return TOKEN_MISSING if chosen and not settings.discord_token else None

    async def check(self, settings: Settings) -> None:
        """Fail fast, before the database starts, when Discord rejects the token."""
        await (await rest_client(settings.discord_token or "")).close()

    async def start(self, app: App) -> Running:
        """Log the bot in (a bad token fails here, with one line) and connect the gateway."""
        from panager.frontends.discord.bot import PanagerBot

        bot = PanagerBot(app)
        await logged_in(bot, app.settings.discord_token or "")
        task = asyncio.create_task(bot.connect(reconnect=True), name="discord")
        return Running("discord", bot.close, task, f"as {bot.user}")

    async def deliver_only(self, app: App, *, alone: bool) -> list[Running]:
        """Without the bot in this process, reminders and OAuth replays still reach Discord
        users: a logged-in client without a gateway connection sends DMs over REST. Without
        a token that is said once, unless another chat front end runs here."""
        token = app.settings.discord_token
        if not token:
            if alone:
                log.warning(
                    "DISCORD_TOKEN is not set: this process cannot deliver to Discord users "
                    "(their reminders wait for a process that can)"
                )
            return []
        from panager.frontends.discord.messenger import DiscordMessenger

        client = await rest_client(token)
        messenger = DiscordMessenger(client, app.deps.users)
        app.deps.messenger.add(messenger)

        async def close() -> None:
            with contextlib.suppress(ValueError):
                app.deps.messenger.messengers.remove(messenger)
            await client.close()

        return [Running("discord-delivery", close)]

    async def answer_only(self, app: App) -> list[Running]:
        """Answer the DMs another process received (`--components answers`): a client logged
        in over REST only (no gateway) claims stored rows (frontends/shared/workers.py);
        reminders go out through it too."""
        from panager.frontends.discord.messenger import DiscordMessenger
        from panager.frontends.discord.worker import DiscordInbox
        from panager.frontends.shared.workers import answering

        client = await rest_client(app.settings.discord_token or "")
        answers = DiscordInbox(app, client)
        messenger = DiscordMessenger(client, app.deps.users)
        app.deps.messenger.add(messenger)

        async def close() -> None:
            await answers.queue.close()
            with contextlib.suppress(ValueError):
                app.deps.messenger.messengers.remove(messenger)
            await client.close()

        try:
            await answering(app, answers.inbox, answers.queue, worker=True)
        except BaseException:
            await close()
            raise
        return [Running("answers", close, None, "discord")]

    def explain(self, exc: BaseException) -> str | None:
        """A missing privileged intent or a token rejected after start."""
        import discord

        if isinstance(exc, discord.PrivilegedIntentsRequired):
            return INTENT_MISSING
        if isinstance(exc, discord.LoginFailure):
            return TOKEN_REJECTED
        return None


DISCORD_FRONT_END = DiscordEntry()
