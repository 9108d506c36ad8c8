"""`send_user_message`: one user asks the assistant to message another registered user.

The work (checks, rate limit, delivery, the note in the recipient's thread) is
`UserMessageRelay` in agent/relay.py; this module is the tool the model sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool

from panager.agent.relay import UserMessageRelay
from panager.agent.tools.base import CONSEQUENTIAL, shown_text, tool

if TYPE_CHECKING:
    from panager.agent.deps import AgentDeps
    from panager.services.users import User

__all__ = ["UserMessageRelay", "describe_relay", "messaging_tools"]  # the relay: agent/relay.py


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

    return [send_user_message]


def describe_relay(args: Mapping[str, Any]) -> str:
    """The relay a confirmation question shows: recipient and the full text, made visible."""
    recipient = str(args.get("recipient", "")).strip().lstrip("@")
    return f"Send a message to @{shown_text(recipient)}: {shown_text(str(args.get('text', '')))}"
