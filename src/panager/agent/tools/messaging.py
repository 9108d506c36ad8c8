"""`send_user_message`: one user asks the assistant to message another registered user.

The work (checks, rate limit, delivery, the note in the recipient's thread) is
`UserMessageRelay` in services/relays/relay.py; this module is the tool the model sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool

from panager.agent.graph.tool import CONSEQUENTIAL, Lookup, looks_up, shown_block, shown_text, tool
from panager.services.linking import platform_label
from panager.services.relays.relay import UserMessageRelay

if TYPE_CHECKING:
    from panager.agent.deps import AgentDeps
    from panager.services.users import User

# the relay: services/relays/relay.py
__all__ = ["UserMessageRelay", "describe_relay", "messaging_tools"]


def messaging_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """`send_user_message` for `user`, when enabled in the config."""
    relay = deps.relay
    if not deps.config.allow_user_messages or relay is None:
        return []

    @tool(classify=CONSEQUENTIAL, describe=describe_relay)
    async def send_user_message(recipient: str, text: str) -> dict:
        """Send a direct message to another registered user of this assistant, by username.

        They receive it as a DM that names the sender. Use only when the user asks you to
        message someone; confirm the recipient's username and the exact text.
        """
        return await relay.send(user, recipient, text)

    async def describe_now(args: Mapping[str, Any]) -> str:
        recipient, platforms = await relay.who(user, str(args.get("recipient", "")))
        where = ", ".join(platform_label(p) for p in platforms) or "their open web page"
        name = shown_text(recipient.display_name) if recipient.display_name else "(none)"
        return "\n".join([
            f"Send a direct message to @{recipient.username} (display name {name}; "
            f"delivered on {where}), naming you as the sender. The whole text:",
            shown_block(str(args.get("text", ""))),
        ])

    looks_up(send_user_message, Lookup(
        describe_now, lambda a: f"recipient {shown_text(str(a.get('recipient', '')))}",
        "the database"))
    return [send_user_message]


def describe_relay(args: Mapping[str, Any]) -> str:
    """The relay a confirmation question shows: recipient and the full text, made visible."""
    recipient = str(args.get("recipient", "")).strip().lstrip("@")
    return (f"Send a message to @{shown_text(recipient)}, the whole text:\n"
            f"{shown_block(str(args.get('text', '')))}")
