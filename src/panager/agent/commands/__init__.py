"""Slash commands, shared by Discord and the terminal; answered with zero model calls.

Each domain module registers its commands with `@command(...)`; `dispatch`
parses `/name args`, checks the caller's admin rights (from the configuration,
at every command) and runs the handler. Unknown commands get a helpful answer
listing what exists.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from panager.agent.deps import AgentDeps
    from panager.agent.turns.runner import Assistant
    from panager.services.proposals import Offer
    from panager.services.users import User

log = logging.getLogger(__name__)
FAILED = ("Sorry, /{name} failed on my side; nothing more came of it. The details are in "
          "Panager's log.")


@dataclass
class CommandReply:
    """A command's answer: text, and optionally a link button or held calls to decide."""

    text: str
    link: dict | None = None  # {"url", "label"}
    ok: bool = True
    offers: tuple[Offer, ...] = ()  # held calls offered on this reply (Approve/Deny)


@dataclass
class CommandContext:
    """Who is asking and what they may touch."""

    user: User
    assistant: Assistant
    front_end: str = "terminal"  # or "discord", "telegram", "web"
    identity: tuple[str, int] | None = None  # (platform, platform id) the command came from

    @property
    def sender(self) -> tuple[str, int] | None:
        """The front-end identity asking: given by the front end; the terminal's is fixed."""
        if self.identity is None and self.front_end == "terminal":
            from panager.services.users import LOCAL_USER_ID

            return ("terminal", LOCAL_USER_ID)
        return self.identity

    @property
    def deps(self) -> AgentDeps:
        """Shared services."""
        return self.assistant.deps


Handler = Callable[[CommandContext, str], Awaitable[CommandReply | str]]


@dataclass(frozen=True)
class Command:
    """A registered slash command."""

    name: str
    handler: Handler
    usage: str
    help: str
    admin_only: bool = False
    front_ends: tuple[str, ...] = ("terminal", "discord", "telegram", "web")


REGISTRY: dict[str, Command] = {}


def command(
    name: str,
    usage: str,
    help: str,
    *,
    admin_only: bool = False,
    front_ends: Iterable[str] = ("terminal", "discord", "telegram", "web"),
) -> Callable[[Handler], Handler]:
    """Register `handler` as `/name`."""

    def register(handler: Handler) -> Handler:
        REGISTRY[name] = Command(name, handler, usage, help, admin_only, tuple(front_ends))
        return handler

    return register


def parse(text: str) -> tuple[str, str] | None:
    """('name', 'args') for '/name args', else None."""
    text = text.strip()
    if not text.startswith("/") or len(text) < 2:
        return None
    name, _, args = text[1:].partition(" ")
    return name.lower(), args.strip()


def is_command(text: str) -> bool:
    """True when text is a slash command (a leading '/' followed by a word)."""
    parsed = parse(text)
    return parsed is not None and parsed[0].replace("_", "").replace("-", "").isalnum()


async def available(ctx: CommandContext) -> list[Command]:
    """Commands the caller may run in this front end, sorted by name."""
    admin = await has_admin_rights(ctx)
    return sorted(
        (
            c
            for c in REGISTRY.values()
            if ctx.front_end in c.front_ends and (admin or not c.admin_only)
        ),
        key=lambda c: c.name,
    )


async def has_admin_rights(ctx: CommandContext) -> bool:
    """Whether the caller is an admin now: an identity of theirs in PANAGER_ADMIN_IDS (or the
    terminal), not the role stored for them, which may date from before a removal or /unlink."""
    return await ctx.deps.access.has_admin_rights(ctx.user.id)


async def dispatch(ctx: CommandContext, text: str) -> CommandReply:
    """Run the slash command in `text` for ctx.user."""
    _load_modules()
    parsed = parse(text)
    if parsed is None:
        return CommandReply("Not a command. Commands start with '/'; try /help.", ok=False)
    name, args = parsed
    cmd = REGISTRY.get(name)
    if cmd is None or ctx.front_end not in cmd.front_ends:
        return CommandReply(await _unknown(name, ctx), ok=False)
    if cmd.admin_only and not await has_admin_rights(ctx):
        return CommandReply(f"/{name} is for admins only.", ok=False)
    try:
        reply = await cmd.handler(ctx, args)
    except Exception:  # one place: every front end shows a sentence, never a traceback
        log.exception("/%s failed for user %s", name, ctx.user.id)
        return CommandReply(FAILED.format(name=name), ok=False)
    return CommandReply(reply) if isinstance(reply, str) else reply


async def _unknown(name: str, ctx: CommandContext) -> str:
    import difflib

    names = [c.name for c in await available(ctx)]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" Did you mean /{close[0]}?" if close else ""
    return f"Unknown command /{name}.{hint} Type /help to see all commands."


_LOADED = False


def _load_modules() -> None:
    """Import the modules that register commands (once)."""
    global _LOADED
    if _LOADED:
        return
    from panager.agent.commands import core  # noqa: F401

    for module in COMMAND_MODULES:
        __import__(module)
    _LOADED = True


COMMAND_MODULES: list[str] = [
    "panager.agent.commands.access",
    "panager.agent.commands.schedule",
    "panager.agent.commands.memory",
    "panager.agent.commands.connect",
    "panager.agent.commands.runtime",
    "panager.agent.commands.sessions",
    "panager.agent.commands.skills",
    "panager.agent.commands.relays",
    "panager.agent.commands.web",
    "panager.agent.commands.tools",
    "panager.agent.commands.jobs",
    "panager.agent.commands.profile",
    "panager.agent.commands.link",
]
