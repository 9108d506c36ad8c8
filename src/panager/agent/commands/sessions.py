"""Conversation files: /sessions, /save [name], /load NAME (JSONL, see services/sessions.py)."""

from __future__ import annotations

from datetime import datetime

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.agent.turns.threads import replace_thread, thread_values
from panager.services.sessions import (
    SessionFormatError,
    SessionLimit,
    SessionStore,
    dump_session,
    parse_session,
    sanitize_name,
)

# A file that does not say what was written from outside content (an older format, a line
# written by hand) loads as if it had been: say so, since questions before actions follow.
UNMARKED_NOTE = (
    "The file does not say which parts were written from outside content, so they count "
    "as if they were: actions with consequences will ask you first."
)


def _store(ctx: CommandContext) -> SessionStore:
    return ctx.deps.runtime.sessions


@command("sessions", "/sessions", "list your saved conversations")
async def sessions_command(ctx: CommandContext, args: str) -> str:
    """Saved conversations, newest first."""
    saved = _store(ctx).list(ctx.user.id)
    if not saved:
        return "No saved conversations. Save this one with /save [name]."
    zone = ctx.user.zone
    lines = ["Saved conversations (load one with /load NAME):"]
    for s in saved:
        when = datetime.fromtimestamp(s.modified, zone)
        lines.append(f"  {s.name}  ({s.size / 1024:.1f} KB, {when:%Y-%m-%d %H:%M})")
    return "\n".join(lines)


@command("save", "/save [name]", "save this conversation to a file")
async def save_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Export the current thread (and its summary) as JSONL, taint marks kept."""
    now = ctx.deps.clock.now()
    name = sanitize_name(args) if args else f"chat-{now.astimezone(ctx.user.zone):%Y%m%d-%H%M}"
    if not name:
        return CommandReply("Use a name with letters or digits, e.g. /save trip-plans.", ok=False)
    values = await thread_values(ctx.assistant, ctx.user)
    messages = values.get("messages", [])
    if not messages:
        return CommandReply("There is nothing to save yet.", ok=False)
    text = dump_session(
        ctx.user.id, messages, values.get("summary"), now,
        summary_tainted=bool(values.get("summary_tainted")),
    )
    try:
        _store(ctx).save(ctx.user.id, name, text)
    except SessionLimit as exc:
        return CommandReply(f"Not saved: {exc}.", ok=False)
    renamed = f" (name cleaned from {args!r})" if args and name != args.strip() else ""
    return f"Saved {len(messages)} messages as {name}{renamed}. Load it later with /load {name}."


@command("load", "/load NAME", "replace this conversation with a saved one")
async def load_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Import a saved conversation with its taint marks (a file that does not say loads
    tainted); a malformed file reports the offending line."""
    name = sanitize_name(args)
    if not name:
        return CommandReply("Which one? /sessions lists the saved conversations.", ok=False)
    try:
        text = _store(ctx).read(ctx.user.id, name)
        session = parse_session(text)
    except FileNotFoundError:
        return CommandReply(f"No saved conversation named {name}. See /sessions.", ok=False)
    except SessionFormatError as exc:
        return CommandReply(f"Could not load {name}: {exc}. Nothing was changed.", ok=False)
    except ValueError as exc:
        return CommandReply(f"Could not load {name}: {exc}.", ok=False)
    count = await replace_thread(
        ctx.assistant, ctx.user, session.messages, session.summary,
        summary_tainted=session.summary_tainted,
    )
    loaded = f"Loaded {name}: {count} messages. Your memories and schedules are unchanged."
    return loaded + (f" {UNMARKED_NOTE}" if session.assumed_tainted else "")
