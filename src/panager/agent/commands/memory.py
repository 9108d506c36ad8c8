"""/memory: list, search, forget and clear long-term memories (no model call)."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.agent.flows.tidy import tidy_line
from panager.services.memory.service import (
    MemoryHit,
    MemoryInputError,
    MemoryService,
    MemoryUnavailable,
)

LIST_LIMIT = 20
PREVIEW_CHARS = 120
SHORT_ID = 8
USAGE = (
    "Usage: /memory (list) · /memory search TEXT · /memory forget ID · "
    "/memory clear (then /memory clear confirm)"
)


def _line(hit: MemoryHit) -> str:
    text = " ".join(hit.content.split())
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    line = f"  {hit.id[:SHORT_ID]}  {hit.updated_at:%Y-%m-%d}  ({hit.category}) {text}"
    if hit.previous is not None:
        was = " ".join(hit.previous.split())
        if len(was) > PREVIEW_CHARS:
            was = was[: PREVIEW_CHARS - 1] + "…"
        line += f" (was: {was})"
    return line


@command("memory", "/memory [forget ID|clear]", "list your memories (also: /memory search TEXT)")
async def memory_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Dispatch the /memory subcommands."""
    service = ctx.deps.memory
    if service is None:
        return CommandReply("Long-term memory is not enabled on this instance.", ok=False)
    action, _, rest = args.partition(" ")
    action, rest = action.lower(), rest.strip()
    try:
        if action in ("", "list"):
            return await _list(ctx, service)
        if action == "search" and rest:
            return await _search(ctx, service, rest)
        if action in ("forget", "delete") and rest:
            return await _forget(ctx, service, rest)
        if action == "clear":
            return await _clear(ctx, service, rest.lower())
    except (MemoryInputError, MemoryUnavailable) as exc:
        return CommandReply(str(exc), ok=False)
    return CommandReply(USAGE, ok=False)


async def _list(ctx: CommandContext, service: MemoryService) -> str:
    total = await service.count(ctx.user.id)
    if total == 0:
        return "You have no saved memories yet. Tell me something to remember."
    hits = await service.list(ctx.user.id, LIST_LIMIT)
    shown = f"newest {len(hits)} of {total}" if total > len(hits) else f"{total}"
    lines = [f"Your memories ({shown}):", *(_line(h) for h in hits)]
    lines.append("Forget one with /memory forget ID; search with /memory search TEXT.")
    tidied = await _tidied(ctx)
    if tidied:
        lines.append(tidied)
    return "\n".join(lines)


async def _tidied(ctx: CommandContext) -> str | None:
    """What the last nightly tidy-up did, and profile changes waiting."""
    jobs, profiles = ctx.deps.system_jobs, ctx.deps.profiles
    job = await jobs.job(ctx.user.id, "tidy") if jobs is not None else None
    waiting = len(await profiles.pending(ctx.user.id)) if profiles is not None else 0
    return tidy_line(job, waiting)


async def _search(ctx: CommandContext, service: MemoryService, query: str) -> str:
    hits = await service.search(ctx.user.id, query, 10)
    if not hits:
        return f"No memories match {query!r}."
    return "\n".join([f"Memories matching {query!r}:", *(_line(h) for h in hits)])


async def _forget(ctx: CommandContext, service: MemoryService, ref: str) -> CommandReply | str:
    hit = await service.find(ctx.user.id, ref)
    if hit is None:
        return CommandReply(
            f"No memory with id {ref!r}. /memory lists your memories with their ids.", ok=False
        )
    await service.forget(ctx.user.id, hit.id)
    return f"Forgot: {_line(hit).strip()}"


async def _clear(ctx: CommandContext, service: MemoryService, rest: str) -> CommandReply | str:
    total = await service.count(ctx.user.id)
    if total == 0:
        return "You have no saved memories."
    if rest != "confirm":
        return (
            f"This deletes all {total} of your memories and cannot be undone. "
            "To go ahead, send: /memory clear confirm"
        )
    deleted = await service.clear(ctx.user.id)
    return f"Deleted all {deleted} of your memories. Your conversation is kept."
