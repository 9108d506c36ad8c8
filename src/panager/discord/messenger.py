"""Delivering reminders and scheduled answers as Discord DMs.

`DiscordMessenger` is added to `app.deps.messenger` (a FanoutMessenger) so the
scheduler and the OAuth replay reach Discord users without knowing about
Discord. It only needs REST, so it works from the bot's client and from a
logged-in client without a gateway connection (a `--components worker`
process).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord

from panager.agent.confirm import proposal_ids
from panager.discord.questions import proposal_view
from panager.discord.replies import send_reply
from panager.services.users import LOCAL_USER_ID

if TYPE_CHECKING:
    from panager.services.users import User

log = logging.getLogger(__name__)


class DiscordMessenger:
    """Sends a DM to a user by id (the DM channel is created on demand)."""

    def __init__(self, client: discord.Client) -> None:
        self.client = client

    async def send(
        self, user: User, text: str, *, link: dict | None = None, key: str | None = None
    ) -> bool:
        """Deliver `text` (and a link button) as a DM; False when it cannot be delivered.

        Held calls of a scheduled answer (`/approve ID` lines) get an Approve button each.
        With a `key`, each chunk carries the nonce `<key>.<n>`: Discord answers a repeated
        send (a delivery retried after a crash) with the first message instead of a copy."""
        if user.id == LOCAL_USER_ID or user.id < 0 or user.status == "blocked":
            return False  # the terminal user, or a person who has no Discord id (Telegram)
        if self.client.is_closed() or self.client.user is None:
            return False
        try:
            channel = await self.client.create_dm(discord.Object(id=user.id))
            view = None if link else proposal_view(proposal_ids(text))
            # Proactive messages (scheduled answers may have read outside content) never
            # unfurl links: a preview is a fetch nobody approved.
            await send_reply(
                channel, text, link=link, nonce_base=key, view=view, suppress_embeds=True
            )
        except discord.HTTPException as exc:
            log.warning("could not DM user %s: %s", user.id, exc)
            return False
        return True
