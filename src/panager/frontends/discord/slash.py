"""The shared slash commands (agent/commands) as Discord application commands in DMs.

Each command of the registry becomes an application command with one optional
text option, `args` — the same text that follows `/name` in a typed message —
so there is one implementation for the terminal, typed DMs and the Discord
command picker. Commands are DM-only. The bot answers them through
`PanagerBot.handle_interaction`, in line with the user's messages.
"""

import logging
import re
from collections.abc import Awaitable, Callable

import discord
from discord import app_commands

from panager.agent.commands import Command, offered_in

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[-_a-z0-9]{1,32}$")
MAX_DESCRIPTION = 100

Handler = Callable[[discord.Interaction, str, str], Awaitable[None]]


def discord_commands() -> list[Command]:
    """Registry commands offered on Discord whose names Discord accepts."""
    return [c for c in offered_in("discord") if NAME_PATTERN.match(c.name)]


def build_tree(client: discord.Client, handler: Handler) -> app_commands.CommandTree:
    """A command tree holding every shared command, each calling `handler(i, name, args)`."""
    tree = app_commands.CommandTree(client)
    for cmd in discord_commands():
        tree.add_command(_app_command(cmd, handler))
    return tree


def _app_command(cmd: Command, handler: Handler) -> app_commands.Command:
    async def callback(interaction: discord.Interaction, args: str | None = None) -> None:
        await handler(interaction, cmd.name, args or "")

    hint = f"what follows {cmd.usage.split(' ')[0]} (usage: {cmd.usage})"[:MAX_DESCRIPTION]
    callback = app_commands.describe(args=hint)(callback)
    description = (cmd.help or cmd.usage)[:MAX_DESCRIPTION]
    return app_commands.Command(
        name=cmd.name,
        description=description,
        callback=callback,
        allowed_contexts=app_commands.AppCommandContext(dm_channel=True),
    )


def signature(tree: app_commands.CommandTree) -> set[tuple[str, str]]:
    """(name, description) of the local commands, to compare with what Discord has."""
    commands = tree.get_commands()  # only slash commands are registered (no context menus)
    return {
        (c.name, c.description) for c in commands if not isinstance(c, app_commands.ContextMenu)
    }


async def sync_if_changed(tree: app_commands.CommandTree) -> bool:
    """Upload the commands when Discord's copy differs (syncing is rate-limited)."""
    remote = {(c.name, c.description) for c in await tree.fetch_commands()}
    if remote == signature(tree):
        return False
    await tree.sync()
    log.info("synced %d application commands", len(tree.get_commands()))
    return True
