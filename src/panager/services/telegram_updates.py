"""Telegram updates into the inbox: what is kept, what is ignored, and the bot's shared state.

`read_update` turns one Bot API update (a JSON object, from `getUpdates` or the
webhook) into an inbox row, or None when Panager ignores it: anything outside
a private chat (groups, supergroups, channels: no row, so no model call),
messages from bots, edits, and update kinds it does not handle. A button
press (`callback_query`) is a row too, so it is handled in line with the
person's messages. `store_update` inserts the row keyed by `update_id`: an
update Telegram sends again is dropped there (exactly once). A forwarded
message is marked (`forwarded`, and `forwarded_from` names its origin when
Telegram does): its text, caption and files are someone else's words.

Nothing here holds a file URL: a file is named by its `file_id`, and only
the front end, which holds the bot token, turns that into bytes.

`TelegramState` keeps the few values every process must agree on (the
webhook secret, the bot's username for invite links) in `telegram_state`.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from panager.db.pool import Pool
from panager.db.queries import one
from panager.services.inbox import InboxService

FILE_KINDS = ("photo", "voice", "audio", "document", "video", "video_note", "sticker")
_BOT_SUFFIX = re.compile(r"^(/[A-Za-z0-9_]+)@[A-Za-z0-9_]+")

GET_STATE = "SELECT value FROM telegram_state WHERE name = %s"
PUT_STATE = """
INSERT INTO telegram_state (name, value) VALUES (%s, %s)
ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
"""
CREATE_STATE = """
INSERT INTO telegram_state (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING
"""


@dataclass(frozen=True)
class TelegramRow:
    """The inbox row of one update Panager handles."""

    update_id: int
    user_id: int
    chat_id: int
    username: str
    display_name: str | None
    text: str
    attachments: bool = False
    payload: dict[str, Any] = field(default_factory=dict)


def read_update(update: dict[str, Any]) -> TelegramRow | None:
    """The row for `update`, or None when it is ignored (module doc)."""
    update_id = update.get("update_id")
    if not isinstance(update_id, int):
        return None
    if isinstance(update.get("message"), dict):
        return _message_row(update_id, update["message"])
    if isinstance(update.get("callback_query"), dict):
        return _button_row(update_id, update["callback_query"])
    return None


def _private(chat: Any) -> bool:
    return isinstance(chat, dict) and chat.get("type") == "private"


def _sender(person: Any) -> tuple[int, str, str | None] | None:
    if (
        not isinstance(person, dict)
        or person.get("is_bot")
        or not isinstance(person.get("id"), int)
    ):
        return None
    name = " ".join(p for p in (person.get("first_name"), person.get("last_name")) if p) or None
    return person["id"], person.get("username") or f"tg{person['id']}", name


def _message_row(update_id: int, message: dict[str, Any]) -> TelegramRow | None:
    sender = _sender(message.get("from"))
    if not _private(message.get("chat")) or sender is None:
        return None
    text = message.get("text") or message.get("caption") or ""
    text = _BOT_SUFFIX.sub(r"\1", text)  # "/help@panager_bot" is "/help"
    files = [_file(kind, message[kind]) for kind in FILE_KINDS if message.get(kind)]
    payload = {
        "kind": "message",
        "message_id": message.get("message_id"),
        "files": files,
        "forwarded": bool(message.get("forward_origin") or message.get("forward_date")),
        "forwarded_from": forward_origin(message),
    }
    return TelegramRow(
        update_id,
        sender[0],
        message["chat"]["id"],
        sender[1],
        sender[2],
        text,
        bool(files),
        payload,
    )


def forward_origin(message: dict[str, Any]) -> str:
    """Who a forwarded message came from, as Telegram names them ("" when it does not say
    or the message is not forwarded): a person, a hidden sender's name, a chat, a channel."""
    origin = message.get("forward_origin")
    if isinstance(origin, dict):
        kind = origin.get("type")
        if kind == "user":
            return _person_name(origin.get("sender_user"))
        if kind == "hidden_user":
            return str(origin.get("sender_user_name") or "")
        return _chat_name(origin.get("sender_chat") if kind == "chat" else origin.get("chat"))
    # Bot API before 7.0: forward_from, forward_from_chat, forward_sender_name
    return (_person_name(message.get("forward_from"))
            or _chat_name(message.get("forward_from_chat"))
            or str(message.get("forward_sender_name") or ""))


def _person_name(person: Any) -> str:
    if not isinstance(person, dict):
        return ""
    name = " ".join(str(p) for p in (person.get("first_name"), person.get("last_name")) if p)
    handle = f"@{person['username']}" if person.get("username") else ""
    return f"{name} ({handle})" if name and handle else name or handle


def _chat_name(chat: Any) -> str:
    if not isinstance(chat, dict):
        return ""
    title = str(chat.get("title") or "")
    handle = f"@{chat['username']}" if chat.get("username") else ""
    return f"{title} ({handle})" if title and handle else title or handle


def _file(kind: str, value: Any) -> dict[str, Any]:
    """A file's id and description (a photo comes in sizes: the largest is kept)."""
    item = value[-1] if isinstance(value, list) and value else value
    item = item if isinstance(item, dict) else {}
    return {
        "kind": kind,
        "file_id": item.get("file_id"),
        "name": item.get("file_name"),
        "mime": item.get("mime_type") or ("image/jpeg" if kind == "photo" else None),
        "size": item.get("file_size"),
    }


def _button_row(update_id: int, query: dict[str, Any]) -> TelegramRow | None:
    sender = _sender(query.get("from"))
    message = query.get("message")
    if sender is None or not isinstance(message, dict) or not _private(message.get("chat")):
        return None
    payload = {
        "kind": "button",
        "callback_id": query.get("id"),
        "data": str(query.get("data") or "")[:64],
        "message_id": message.get("message_id"),
    }
    return TelegramRow(
        update_id, sender[0], message["chat"]["id"], sender[1], sender[2], "", False, payload
    )


async def store_update(inbox: InboxService, update: dict[str, Any]) -> bool:
    """Store the update's row; False when ignored or seen before."""
    row = read_update(update)
    if row is None:
        return False
    return await inbox.accept(
        message_id=row.update_id,
        user_id=row.user_id,
        channel_id=row.chat_id,
        username=row.username,
        display_name=row.display_name,
        content=row.text,
        attachments=row.attachments,
        payload=row.payload,
    )


def invite_link(bot_username: str, code: str) -> str:
    """The deep link that opens the bot and sends `/start CODE` for the person."""
    return f"https://t.me/{bot_username}?start={code}"


class TelegramState:
    """Values shared by every process serving one bot (table `telegram_state`)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def get(self, name: str) -> str | None:
        """The stored value, or None."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_STATE, (name,))).fetchone()
        return row["value"] if row else None

    async def put(self, name: str, value: str) -> None:
        """Store a value."""
        async with self.pool.connection() as conn:
            await conn.execute(PUT_STATE, (name, value))

    async def invite_link(self, code: str) -> str | None:
        """The Telegram deep link for an invite code, once the bot has run (else None)."""
        username = await self.get("bot_username")
        return invite_link(username, code) if username else None

    async def webhook_secret(self) -> str:
        """The webhook's secret (43 random URL-safe characters), made once for all processes."""
        async with self.pool.connection() as conn:
            await conn.execute(CREATE_STATE, ("webhook_secret", secrets.token_urlsafe(32)))
            return one(await (await conn.execute(GET_STATE, ("webhook_secret",))).fetchone())[
                "value"
            ]
