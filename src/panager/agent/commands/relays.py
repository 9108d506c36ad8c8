"""/relays: the recipient's side of `send_user_message` — turn relays off, block senders."""

from __future__ import annotations

from panager.agent.commands import CommandContext, CommandReply, command
from panager.services.relays import RelayService

USAGE = "/relays [on|off|block NAME|unblock NAME]"


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
    """Block or unblock a sender by name. The answer is the same whether or not someone has
    that name (and whether a block existed), so the command cannot probe who uses Panager."""
    if not name:
        return CommandReply(f"Whom? {USAGE}", ok=False)
    sender = await ctx.deps.users.by_username(name)
    if sender is not None and sender.id != ctx.user.id:
        if word == "block":
            await relays.block(ctx.user.id, sender.id)
        else:
            await relays.unblock(ctx.user.id, sender.id)
    if word == "block":
        return CommandReply(f"Done: if @{name} uses Panager, they can no longer message you "
                            "through it.")
    return CommandReply(f"Done: if @{name} uses Panager, they can message you through it again.")
