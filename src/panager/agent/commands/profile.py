"""/profile: show the standing profile and approve or reject suggested changes."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.services.profile import MAX_PROFILE_CHARS, ProfileInputError

USAGE = "/profile [approve ID | reject ID]"


@command("profile", USAGE, "your short profile, shown to me in every message")
async def profile_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show the profile and pending proposals, or decide one."""
    service = ctx.deps.profiles
    if service is None:
        return CommandReply("Profiles are not available in this setup.", ok=False)
    verb, _, rest = args.strip().partition(" ")
    verb = verb.lower()
    if verb in ("approve", "reject") and rest.strip():
        try:
            decided = await service.decide(ctx.user.id, rest.strip(), verb == "approve")
        except ProfileInputError as exc:
            return CommandReply(f"Not applied: {exc}", ok=False)
        if decided is None:
            return CommandReply(f"No pending profile change {rest.strip()!r}.", ok=False)
        done = "applied" if verb == "approve" else "rejected"
        return f"Profile change {decided.id} {done} ({decided.section})."
    if verb:
        return CommandReply(f"Usage: {USAGE}", ok=False)
    return await _show(ctx)


async def _show(ctx: CommandContext) -> str:
    service = ctx.deps.profiles
    assert service is not None
    profile = await service.get(ctx.user.id)
    if profile.is_empty():
        lines = ["Your profile is empty. Tell me about yourself, the people who matter to "
                 "you, your preferences or how I should work, and ask me to keep it in "
                 "your profile."]
    else:
        lines = [f"Your profile ({profile.size:,} of {MAX_PROFILE_CHARS:,} characters):"]
        lines += [f"• {name}: {text}" for name, text in profile.sections.items()]
    pending = await service.pending(ctx.user.id)
    if pending:
        lines.append(f"{len(pending)} suggested change(s) waiting for you:")
        for p in pending:
            why = f" — {p.reason}" if p.reason else ""
            lines.append(f"  {p.id} {p.section}: “{p.text}”{why}")
        lines.append("Approve with /profile approve ID, or /profile reject ID.")
    return "\n".join(lines)
