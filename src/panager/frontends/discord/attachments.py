"""Discord attachments: described when a DM is stored, downloaded when it is answered.

Only URLs on Discord's CDN hosts (`discord_cdn_hosts`, default
cdn.discordapp.com and media.discordapp.net) over https are fetched — never
whatever URL a payload names — and a download stops past the size cap. A
voice message (the message's `voice` flag) that the person recorded is their
own words; a forwarded one (inside `message_snapshots`) and any audio file
are outside content (services/media/intake.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

import aiohttp
import discord

from panager.services.media.intake import Attachment, MediaIntake, refused
from panager.services.media.sniff import clean_name

log = logging.getLogger(__name__)
DOWNLOAD_TIMEOUT = 30.0


def describe(message: discord.Message) -> list[dict]:
    """What the DM carries: its own attachments and those of forwarded messages."""
    refs = [_ref(a, voice=message.flags.voice, forwarded=False) for a in message.attachments]
    for snapshot in message.message_snapshots:
        refs += [_ref(a, voice=snapshot.flags.voice, forwarded=True)
                 for a in snapshot.attachments]
    return refs


def _ref(att: discord.Attachment, *, voice: bool, forwarded: bool) -> dict:
    return {
        "filename": att.filename,
        "url": att.url,
        "content_type": att.content_type,
        "size": att.size,
        "voice": bool(voice or att.is_voice_message()),
        "forwarded": forwarded,
    }


def allowed(url: str, hosts: Sequence[str]) -> bool:
    """Whether `url` is on one of Discord's CDN hosts: https to a listed host, or exactly a
    listed "scheme://host[:port]" (a local test server)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    listed = {h.lower().rstrip("/") for h in hosts}
    return (parts.scheme == "https" and parts.netloc.lower() in listed) or origin in listed


class DiscordAttachments:
    """Downloads a DM's attachments from the CDN and hands them to the intake."""

    def __init__(self, intake: MediaIntake, hosts: Sequence[str]) -> None:
        self.intake = intake
        self.hosts = tuple(hosts)

    async def take_all(self, person_id: int, refs: Sequence[dict]) -> list[Attachment]:
        """Each described attachment, taken in (a refused one carries its line)."""
        if not refs:
            return []
        timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            return [await self._take(session, person_id, ref) for ref in refs]

    async def _take(self, session: aiohttp.ClientSession, person_id: int, ref: dict
                    ) -> Attachment:
        name = clean_name(str(ref.get("filename") or "file"))
        base = Attachment("rejected", name, size=int(ref.get("size") or 0))
        url = str(ref.get("url") or "")
        if not allowed(url, self.hosts):
            log.warning("attachment URL outside Discord's CDN refused")
            return refused(base, "it is not on Discord's file servers")
        cap = self.intake.limits.max_bytes
        if base.size > cap:
            return refused(base, f"it is larger than the {cap / 1e6:g} MB limit")
        try:
            data = await self._download(session, url, cap)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("attachment download failed: %s", type(exc).__name__)
            return refused(base, "it could not be downloaded from Discord")
        if data is None:
            return refused(base, f"it is larger than the {cap / 1e6:g} MB limit")
        return await self.intake.take(
            person_id, name, data, declared_type=ref.get("content_type"),
            forwarded=bool(ref.get("forwarded")), voice=bool(ref.get("voice")),
        )

    @staticmethod
    async def _download(session: aiohttp.ClientSession, url: str, cap: int) -> bytes | None:
        """The file's bytes; None when it is larger than `cap` (reading stops there)."""
        async with session.get(url, allow_redirects=False) as response:
            response.raise_for_status()
            chunks, size = [], 0
            async for chunk in response.content.iter_chunked(65536):
                size += len(chunk)
                if size > cap:
                    return None
                chunks.append(chunk)
                await asyncio.sleep(0)
            return b"".join(chunks)
