"""/relays: the recipient's side of `send_user_message` — turn relays off, block senders."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.services.relays.store import MAX_BLOCKED_NAMES, RelayService

USAGE = "/relays [on|off|block NAME|unblock NAME]"
MAX_NAME = 64


@command("relays", USAGE, "messages other users send you via Panager: on/off, block a sender")
async def relays_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show or change who may relay messages to this user."""
    relays = ctx.deps.relays
    word, _, rest = args.strip().partition(" ")
    word = word.lower()
    if word in ("on", "off"):
        await relays.set_off(ctx.user.id, word == "off")
        return "Messages from other users are " + ("off." if word == "off" else "on again.")
    if word in ("block", "unblock"):
        return await _block(ctx, relays, word, rest.strip().lstrip("@"))
    if word:
        return CommandReply(f"Usage: {USAGE}", ok=False)
    state = "off" if await relays.is_off(ctx.user.id) else "on"
    blocked = ", ".join("@" + n for n in await relays.blocked(ctx.user.id)) or "nobody"
    return f"Messages from other users: {state}. Blocked: {blocked}. Change: {USAGE}"


async def _block(ctx: CommandContext, relays: RelayService, word: str, name: str) -> CommandReply:
    """Block or unblock a sender by name. The answer, and the list `/relays` shows after
    it, are the same whether or not someone has that name (the name is kept as typed),
    so the command cannot probe who uses Panager."""
    if not name or len(name) > MAX_NAME:
        return CommandReply(f"Whom? {USAGE}", ok=False)
    sender = await ctx.deps.users.by_username(name)
    holder = sender.id if sender is not None and sender.id != ctx.user.id else None
    if word == "unblock":
        await relays.unblock(ctx.user.id, name, holder)
        return CommandReply(
            f"Done: if @{name} uses Panager, they can message you through it again.")
    if not await relays.block(ctx.user.id, name, holder):
        return CommandReply(f"You have blocked {MAX_BLOCKED_NAMES} names; unblock some first.",
                            ok=False)
    return CommandReply(f"Done: if @{name} uses Panager, they can no longer message you "
                        "through it.")
