"""/link, /unlink and /notify: one person across Discord, Telegram and the terminal."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.agent.flows.linking import Linking
from panager.services.linking import (
    LinkRefused,
    LinkService,
    looks_like_code,
    notify_choices,
    platform_label,
)

LINK_USAGE = "/link [CODE|confirm|cancel|approve|deny]"
NOT_LET_IN = (
    "Here you can only use a code: send /link in a front end where you already talk to me, "
    "then /link CODE here."
)
CHAT_ONLY = "Linking works from Discord, Telegram or the terminal, not from here."


@command("link", LINK_USAGE, "join this front end with your account on another one")
async def link_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Issue a code, claim one (then confirm or cancel it), or approve/deny the claim
    waiting for you."""
    identity = ctx.sender
    if identity is None:
        return CommandReply(CHAT_ONLY, ok=False)
    linking = Linking(ctx.assistant)
    word, _, rest = args.strip().partition(" ")
    if word.lower() == "confirm":
        return await linking.confirm(ctx.user, identity)
    if word.lower() == "cancel":
        return await linking.cancel(identity)
    if ctx.user.status != "active" and not looks_like_code(args):
        return CommandReply(NOT_LET_IN, ok=False)
    if word.lower() == "approve":
        return await linking.approve(ctx.user, rest)
    if word.lower() == "deny":
        return await linking.deny(ctx.user)
    if word and not looks_like_code(args):
        return CommandReply(f"That is not a link code. Usage: {LINK_USAGE}", ok=False)
    if word:
        try:
            return await linking.claim(ctx.user, identity, args)
        except LinkRefused as exc:
            return CommandReply(str(exc), ok=False)
    waiting = await linking.links.pending(ctx.user.id)
    if waiting is not None:
        who = platform_label(waiting.claimed_platform)
        return (
            f"A {who} account used your code and waits for you: /link approve joins it, "
            "/link deny refuses it."
        )
    return await linking.issue(ctx.user, identity)


@command("unlink", "/unlink", "detach this front end: it starts as a new, empty person")
async def unlink_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Detach the identity this command came from."""
    identity = ctx.sender
    if identity is None:
        return CommandReply(CHAT_ONLY, ok=False)
    return await Linking(ctx.assistant).unlink(ctx.user, identity)


@command("notify", "/notify [discord|telegram|auto]", "where reminders and messages reach you")
async def notify_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show or set where proactive messages go."""
    links = LinkService(ctx.deps.pool, ctx.deps.clock)
    choice = args.strip().lower()
    current, order = await links.route(ctx.user.id)
    if not choice:
        where = platform_label(order[0]) if order else "the terminal or web page while open"
        return (
            f"Reminders go to: {current} (now {where}). "
            f"Change: {_choices_text()} (the chat you wrote last)."
        )
    if choice not in notify_choices():
        return CommandReply(f"Usage: /notify {'|'.join(_notify_order())}", ok=False)
    if choice != "auto" and choice not in order:
        return CommandReply(
            f"You have no {platform_label(choice)} account joined. Send /link there first.",
            ok=False,
        )
    await links.set_notify(ctx.user.id, choice)
    if choice == "auto":
        return "Reminders now go to the chat you wrote from last."
    return f"Reminders now go to {platform_label(choice)}."


def _notify_order() -> list[str]:
    """The chat front ends by name, then "auto"."""
    return [c for c in notify_choices() if c != "auto"] + ["auto"]


def _choices_text() -> str:
    """'/notify discord, /notify telegram or /notify auto'."""
    shown = [f"/notify {c}" for c in _notify_order()]
    return ", ".join(shown[:-1]) + f" or {shown[-1]}"
