"""Slash commands, shared by every front end; answered with zero model calls.

`base.py` says what a command is (`@command(...)`, `CommandContext`,
`CommandReply`) and runs one (`dispatch`: parse `/name args`, check the
caller's admin rights at every command, run the handler; an unknown command
gets a helpful answer listing what exists). Each domain module below
registers its commands as it is imported; `COMMAND_MODULES` is that list, as
code: a new command module is one import and one line in it.
"""

from __future__ import annotations

from types import ModuleType

from panager.agent.commands import (
    access,
    core,
    google,
    jobs,
    link,
    memory,
    profile,
    relays,
    runtime,
    schedule,
    sessions,
    skills,
    tools,
    web,
)
from panager.agent.commands.base import (
    REGISTRY,
    Command,
    CommandContext,
    CommandReply,
    Handler,
    available,
    command,
    dispatch,
    has_admin_rights,
    is_command,
    offered_in,
    parse,
)

# The modules that register commands (names are unique: `@command` refuses a second one).
COMMAND_MODULES: tuple[ModuleType, ...] = (
    access,
    core,
    google,
    jobs,
    link,
    memory,
    profile,
    relays,
    runtime,
    schedule,
    sessions,
    skills,
    tools,
    web,
)

__all__ = [
    "COMMAND_MODULES",
    "REGISTRY",
    "Command",
    "CommandContext",
    "CommandReply",
    "Handler",
    "available",
    "command",
    "dispatch",
    "has_admin_rights",
    "is_command",
    "offered_in",
    "parse",
]
