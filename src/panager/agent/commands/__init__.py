"""Slash commands, shared by every front end; answered with zero model calls.

`base.py` says what a command is (`@command(...)`, `CommandContext`,
`CommandReply`) and runs one (`dispatch`: parse `/name args`, check the
caller's admin rights at every command, run the handler; an unknown command
gets a helpful answer listing what exists). Each domain module below
registers its commands as it is imported; the import below is that list, as
code: a new command module is one line in it.
"""

from __future__ import annotations

# The command modules, one line each: importing one registers its commands.
from panager.agent.commands import (  # noqa: F401
    access,
    connect,
    core,
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

__all__ = [
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
