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

from panager.frontends.discord.questions import proposal_view
from panager.frontends.discord.replies import send_reply
from panager.services.users import LOCAL_USER_ID

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panager.services.proposals import Offer
    from panager.services.users import User, UserService

log = logging.getLogger(__name__)


class DiscordMessenger:
    """Sends a DM to a user by id (the DM channel is created on demand)."""

    platform = "discord"

    def __init__(self, client: discord.Client, users: UserService | None = None) -> None:
        self.client = client
        self.users = users  # to find a joined person's Discord id (else: person id = Discord id)

    async def _discord_id(self, user: User) -> int | None:
        if self.users is None:
            return None if user.id == LOCAL_USER_ID or user.id < 0 else user.id
        identities = await self.users.identities(user.id)
        if not identities and user.id > LOCAL_USER_ID:
            return user.id  # a person made without identities (`UserService.ensure`)
        ids = [pid for p, pid in identities if p == "discord"]
        return ids[0] if ids else None

    async def send(
        self,
        user: User,
        text: str,
        *,
        link: dict | None = None,
        key: str | None = None,
        offers: Sequence[Offer] = (),
    ) -> bool:
        """Deliver `text` (and a link button) as a DM; False when it cannot be delivered.

        The held calls offered on it get Approve and Deny each (from `offers` only).
        With a `key`, each chunk carries the nonce `<key>.<n>`: Discord answers a repeated
        send (a delivery retried after a crash) with the first message instead of a copy."""
        if user.status == "blocked" or self.client.is_closed() or self.client.user is None:
            return False
        discord_id = await self._discord_id(user)
        if discord_id is None:
            return False  # the terminal user, or a person who has no Discord id (Telegram)
        try:
            channel = await self.client.create_dm(discord.Object(id=discord_id))
            view = None if link else proposal_view(offers)
            # Proactive messages (scheduled answers may have read outside content) never
            # unfurl links: a preview is a fetch nobody approved.
            await send_reply(
                channel, text, link=link, nonce_base=key, view=view, suppress_embeds=True
            )
        except discord.HTTPException as exc:
            log.warning("could not DM user %s: %s", user.id, exc)
            return False
        return True
