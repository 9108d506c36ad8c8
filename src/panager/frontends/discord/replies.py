"""Posting Panager's answers to Discord: chunks, link buttons and nonces.

Answers go out as chunks under Discord's 2,000-character limit (code fences
kept intact by `split_message`), in order, with a link button on the last one
when the answer carries a link. Each chunk can carry a deterministic nonce
(`<message id>.<n>`): Discord then answers a repeated send (a retry after a
network error) with the first message instead of posting a duplicate.
"""

from __future__ import annotations

from typing import overload

import discord

from panager.frontends.shared import links
from panager.frontends.shared.chunking import split_message

MAX_BUTTON_URL = 512  # Discord rejects longer button URLs
MAX_BUTTON_LABEL = 80
MAX_NONCE = 25


def link_view(link: dict | None) -> discord.ui.View | None:
    """A view with one link button, or None when the link cannot be a button."""
    if not link or not button_url_ok(link.get("url", "")):
        return None
    # timeout=None: a timed view would leave a timer task behind for a button that
    # never produces interactions.
    view = discord.ui.View(timeout=None)
    label = links.link_label(link, MAX_BUTTON_LABEL)
    view.add_item(discord.ui.Button(label=label, url=link["url"]))
    return view


def button_url_ok(url: str) -> bool:
    """Discord link buttons take http(s) URLs of at most 512 characters."""
    return url.startswith(("https://", "http://")) and len(url) <= MAX_BUTTON_URL


def with_link_text(text: str, link: dict | None) -> str:
    """Append the link as text when it cannot be a Discord button."""
    return links.with_link_text(text, link, button_url_ok)


@overload
def nonce(base: int | str, suffix: str | int) -> str: ...
@overload
def nonce(base: None, suffix: str | int) -> None: ...
@overload
def nonce(base: int | str | None, suffix: str | int) -> str | None: ...
def nonce(base: int | str | None, suffix: str | int) -> str | None:
    """A nonce derived from the message being answered (Discord allows 25 characters)."""
    if base is None:
        return None
    return f"{base}.{suffix}"[:MAX_NONCE]


async def send_reply(
    channel: discord.abc.Messageable,
    text: str,
    *,
    link: dict | None = None,
    nonce_base: int | str | None = None,
    reference: discord.MessageReference | None = None,
    view: discord.ui.View | None = None,
    suppress_embeds: bool = False,
) -> list[discord.Message]:
    """Post `text` as ordered chunks; the link button (or `view`) goes on the last chunk.

    `suppress_embeds`: no link previews (an answer written with outside content: an
    unfurled link is a fetch nobody approved)."""
    chunks = split_message(with_link_text(text, link)) or ["(empty answer)"]
    view = view or link_view(link)
    sent = []
    for i, chunk in enumerate(chunks):
        kwargs: dict = {"nonce": nonce(nonce_base, i)} if nonce_base is not None else {}
        if suppress_embeds:
            kwargs["suppress_embeds"] = True
        if view is not None and i == len(chunks) - 1:
            kwargs["view"] = view
        if reference is not None and i == 0:
            kwargs.update(reference=reference, mention_author=False)
        sent.append(await channel.send(chunk, **kwargs))
    return sent


async def send_followup(
    interaction: discord.Interaction,
    text: str,
    *,
    link: dict | None = None,
    view: discord.ui.View | None = None,
) -> None:
    """Answer a deferred slash command with the same chunking and link button (or `view`)."""
    chunks = split_message(with_link_text(text, link)) or ["(empty answer)"]
    view = link_view(link) or view
    for i, chunk in enumerate(chunks):
        if view is not None and i == len(chunks) - 1:
            await interaction.followup.send(chunk, view=view)
        else:
            await interaction.followup.send(chunk)
