"""A local fake Telegram Bot API for end-to-end tests, driven by the real aiogram client.

Point the bot at it with `TELEGRAM_API_URL = fake.base_url` (aiogram calls
`{base}/bot<token>/<method>` and downloads from `{base}/file/bot<token>/<path>`).
Tests play the people (`dm`, `group_message`, `press`, `photo`) and read what
the bot did from the recorded lists (`sent`, `edits`, `actions`, `answers`,
`commands`, `calls`).

Behaviour worth knowing (Telegram's, where a bot can trip over it):

* A wrong token answers 401; an unknown method 404 (recorded in `unhandled`).
* `getUpdates` drops the updates below `offset` (confirmed), returns the rest, and
  with none waiting holds the request up to `timeout` seconds (long polling). A
  second `getUpdates` while one is held answers 409 ("terminated by other
  getUpdates request"), as does any `getUpdates` while a webhook is set.
* `sendMessage` / `editMessageText`: text longer than 4,096 characters after
  parsing (UTF-16 units) is a 400 "message is too long"; markup Telegram cannot
  parse (`parse_mode` HTML with an unknown, unclosed or misnested tag or a bare
  `<`/`&`; MarkdownV2 with an unescaped reserved character) is a 400 "can't
  parse entities"; an edit that changes nothing is a 400 "message is not
  modified".
* `shown_to(chat)` is what the person sees: the current plain text of each message.
* `fail_next(method, …)` makes the next call of a method fail the way Telegram's
  servers sometimes do: a JSON error (`{"ok": false, "error_code": 500, …}`), or
  with `page` an HTML page such as the 502 a proxy in front of the Bot API sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import json
import re
import time
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

BOT_ID = 777000111
BOT_USERNAME = "panager_test_bot"
MAX_TEXT = 4096
HTML_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "a",
    "code",
    "pre",
    "tg-spoiler",
    "span",
    "blockquote",
    "tg-emoji",
}
MDV2_RESERVED = set("_*[]()~`>#+-=|{}.!")


class MarkupError(ValueError):
    """Telegram would answer: can't parse entities."""


class _StrictHTML(HTMLParser):
    """Telegram's HTML subset: known tags, properly nested; text unescaped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in HTML_TAGS:
            raise MarkupError(f'unsupported start tag "{tag}"')
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            raise MarkupError(f'unexpected end tag "{tag}"')

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_html(text: str) -> str:
    """The plain text Telegram shows for `text` in HTML mode (MarkupError when it can't)."""
    if re.search(r"<(?![a-zA-Z/])", text) or re.search(
        r"&(?!(lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);)", text
    ):
        raise MarkupError("unescaped < or &")
    parser = _StrictHTML()
    parser.feed(text)
    parser.close()
    if parser.stack:
        raise MarkupError(f'can\'t find end tag corresponding to start tag "{parser.stack[-1]}"')
    return "".join(parser.text)


def parse_markdown_v2(text: str) -> str:
    """A strict reading of MarkdownV2: every reserved character outside markup escaped."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch in MDV2_RESERVED:
            raise MarkupError(f"character '{ch}' is reserved and must be escaped")
        out.append(ch)
        i += 1
    return "".join(out)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class FakeTelegram:
    """The fake Bot API server; `async with FakeTelegram(token) as fake:`."""

    def __init__(self, token: str = "123456:TEST-fake-token-for-panager-tests-0000") -> None:
        self.token = token
        self.updates: list[dict] = []
        self.confirmed = 0  # highest update_id below the last offset
        self.sent: list[dict] = []  # every message the bot posted (current state)
        self.edits: list[dict] = []
        self.deleted: list[int] = []
        self.actions: list[dict] = []
        self.answers: list[dict] = []  # answerCallbackQuery
        self.commands: list[dict] = []
        self.calls: list[tuple[str, dict]] = []
        self.rejected: list[tuple[str, str]] = []  # (method, description) of 400s
        self.unhandled: list[str] = []
        self.webhook: dict | None = None
        self.files: dict[str, bytes] = {}
        self.polls = 0
        self.conflicts = 0
        self.hold_sends: Callable[[dict], Any] | None = None  # async hook before a send returns
        self._polling = False
        self._failures: dict[str, list[tuple[int, str, str | None]]] = {}
        self._new = asyncio.Event()
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(500_001)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # -- server ------------------------------------------------------------------------------

    async def __aenter__(self) -> FakeTelegram:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.*}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._new.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params = dict(await request.post()) if request.method == "POST" else dict(request.query)
        params = {k: _decode(v) for k, v in params.items()}
        self.calls.append((method, params))
        if self._failures.get(method):
            status, description, page = self._failures[method].pop(0)
            if page is not None:
                return web.Response(status=status, text=page, content_type="text/html")
            return _error(status, description)
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            self.unhandled.append(method)
            return _error(404, "Not Found: method not found")
        try:
            result = await handler(params)
        except MarkupError as exc:
            description = f"Bad Request: can't parse entities: {exc}"
            self.rejected.append((method, description))
            return _error(400, description)
        except _ApiError as exc:
            if exc.code == 400:
                self.rejected.append((method, exc.description))
            return _error(exc.code, exc.description)
        return web.json_response({"ok": True, "result": result})

    async def _file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        data = self.files.get(request.match_info["path"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data)

    def fail_next(
        self,
        method: str,
        status: int = 500,
        description: str = "Internal Server Error",
        page: str | None = None,
    ) -> None:
        """The next (not yet failed) call of `method` answers `status`: Telegram's JSON error
        with `description`, or the HTML `page` when given."""
        self._failures.setdefault(method, []).append((status, description, page))

    # -- methods -----------------------------------------------------------------------------

    async def _m_getMe(self, p: dict) -> dict:
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Panager",
            "username": BOT_USERNAME,
            "can_join_groups": False,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _m_getUpdates(self, p: dict) -> list:
        if self.webhook is not None:
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is active")
        if self._polling:
            self.conflicts += 1
            raise _ApiError(
                409,
                "Conflict: terminated by other getUpdates request; make sure "
                "that only one bot instance is running",
            )
        self._polling = True
        self.polls += 1
        try:
            offset = int(p.get("offset") or 0)
            if offset:
                self.confirmed = max(self.confirmed, offset - 1)
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
            deadline = time.monotonic() + float(p.get("timeout") or 0)
            while not self.updates and time.monotonic() < deadline:
                self._new.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._new.wait(), deadline - time.monotonic())
            return self.updates[: int(p.get("limit") or 100)]
        finally:
            self._polling = False

    async def _m_sendMessage(self, p: dict) -> dict:
        text = self._checked(p)
        if self.hold_sends is not None:
            await self.hold_sends(p)
        message = {
            "message_id": next(self._ids),
            "chat_id": int(p["chat_id"]),
            "text": text,
            "raw": p["text"],
            "parse_mode": p.get("parse_mode"),
            "reply_markup": p.get("reply_markup"),
            "link_preview_options": p.get("link_preview_options"),
            "reply_parameters": p.get("reply_parameters"),
            "time": time.monotonic(),
        }
        self.sent.append(message)
        return self._message_json(message)

    async def _m_editMessageText(self, p: dict) -> dict:
        text = self._checked(p)
        message = self._find(p)
        if message["text"] == text and message["reply_markup"] == p.get("reply_markup"):
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message "
                "content and reply markup are exactly the same",
            )
        message.update(
            text=text,
            raw=p["text"],
            parse_mode=p.get("parse_mode"),
            reply_markup=p.get("reply_markup"),
        )
        self.edits.append(
            {"message_id": message["message_id"], "text": text, "time": time.monotonic()}
        )
        return self._message_json(message)

    async def _m_editMessageReplyMarkup(self, p: dict) -> dict:
        message = self._find(p)
        message["reply_markup"] = p.get("reply_markup")
        return self._message_json(message)

    async def _m_deleteMessage(self, p: dict) -> bool:
        message = self._find(p)
        self.sent.remove(message)
        self.deleted.append(message["message_id"])
        return True

    async def _m_sendChatAction(self, p: dict) -> bool:
        self.actions.append({"chat_id": int(p["chat_id"]), "action": p["action"]})
        return True

    async def _m_answerCallbackQuery(self, p: dict) -> bool:
        self.answers.append(p)
        return True

    async def _m_setMyCommands(self, p: dict) -> bool:
        self.commands = p["commands"]
        return True

    async def _m_getMyCommands(self, p: dict) -> list:
        return self.commands

    async def _m_setWebhook(self, p: dict) -> bool:
        secret = p.get("secret_token", "")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret or "x"):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        if not str(p.get("url", "")).startswith("https://"):
            raise _ApiError(400, "Bad Request: bad webhook: HTTPS url must be provided for webhook")
        self.webhook = p
        return True

    async def _m_deleteWebhook(self, p: dict) -> bool:
        self.webhook = None
        return True

    async def _m_getWebhookInfo(self, p: dict) -> dict:
        return {
            "url": (self.webhook or {}).get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self.updates),
        }

    async def _m_getFile(self, p: dict) -> dict:
        file_id = p["file_id"]
        path = f"documents/{file_id}.bin"
        if path not in self.files:
            raise _ApiError(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": "u" + file_id,
            "file_size": len(self.files[path]),
            "file_path": path,
        }

    # -- helpers for the methods ----------------------------------------------------------------

    def _check_buttons(self, p: dict) -> None:
        markup = p.get("reply_markup")
        rows = markup.get("inline_keyboard", []) if isinstance(markup, dict) else []
        for button in (b for row in rows for b in row):
            url = str(button.get("url") or "")
            if url and ("localhost" in url or "127.0.0.1" in url):
                raise _ApiError(400, "Bad Request: BUTTON_URL_INVALID")
            data = button.get("callback_data")
            if data is not None and not 1 <= len(str(data).encode()) <= 64:
                raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")

    def _checked(self, p: dict) -> str:
        self._check_buttons(p)
        raw = p.get("text", "")
        mode = p.get("parse_mode")
        text = (
            parse_html(raw)
            if mode == "HTML"
            else parse_markdown_v2(raw)
            if mode == "MarkdownV2"
            else raw
        )
        text = text.strip()  # Telegram trims a message's outer whitespace
        if not text:
            raise _ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT:
            raise _ApiError(400, "Bad Request: message is too long")
        return text

    def _find(self, p: dict) -> dict:
        wanted = (int(p["chat_id"]), int(p["message_id"]))
        for message in self.sent:
            if (message["chat_id"], message["message_id"]) == wanted:
                return message
        raise _ApiError(400, "Bad Request: message to edit not found")

    def _message_json(self, m: dict) -> dict:
        out = {
            "message_id": m["message_id"],
            "date": int(time.time()),
            "chat": {"id": m["chat_id"], "type": "private", "first_name": "someone"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Panager"},
            "text": m["text"],
        }
        if m.get("reply_markup"):
            out["reply_markup"] = m["reply_markup"]
        return out

    # -- playing the people ---------------------------------------------------------------------

    def _push(self, update: dict) -> dict:
        update = {"update_id": next(self._update_ids), **update}
        self.updates.append(update)
        self._new.set()
        return update

    def person(self, user_id: int, username: str | None = None) -> dict:
        return {
            "id": user_id,
            "is_bot": False,
            "first_name": f"Person{user_id}",
            "username": username or f"person{user_id}",
        }

    def dm(self, user_id: int, text: str, **extra: Any) -> dict:
        """A private-chat message from `user_id`; returns the update."""
        message = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private", "first_name": f"Person{user_id}"},
            "from": self.person(user_id),
            "text": text,
            **extra,
        }
        if not text:
            del message["text"]
        return self._push({"message": message})

    def group_message(self, user_id: int, text: str, chat_id: int = -100123) -> dict:
        message = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "group", "title": "Family"},
            "from": self.person(user_id),
            "text": text,
        }
        return self._push({"message": message})

    def _stored(self, data: bytes) -> dict:
        file_id = f"F{next(self._ids)}"
        self.files[f"documents/{file_id}.bin"] = data
        return {"file_id": file_id, "file_unique_id": "u" + file_id, "file_size": len(data)}

    def document(
        self, user_id: int, data: bytes, name: str, caption: str = "", mime: str = "text/plain",
        **extra: Any,
    ) -> dict:
        """A file sent as a document (optionally with a caption)."""
        doc = self._stored(data) | {"file_name": name, "mime_type": mime}
        return self.dm(user_id, "", document=doc, **({"caption": caption} if caption else {}),
                       **extra)

    def photo(self, user_id: int, data: bytes, caption: str = "") -> dict:
        """A photo: Telegram sends it in several sizes (the largest last)."""
        small = self._stored(data[: len(data) // 2]) | {"width": 4, "height": 4}
        large = self._stored(data) | {"width": 8, "height": 8}
        return self.dm(user_id, "", photo=[small, large],
                       **({"caption": caption} if caption else {}))

    def voice(self, user_id: int, data: bytes, duration: int = 4, **extra: Any) -> dict:
        """A voice message the person recorded (`forward_origin` in `extra`: forwarded)."""
        note = self._stored(data) | {"duration": duration, "mime_type": "audio/ogg"}
        return self.dm(user_id, "", voice=note, **extra)

    def sticker(self, user_id: int) -> dict:
        sticker = self._stored(b"RIFF") | {"width": 512, "height": 512, "is_animated": False,
                                            "is_video": False, "type": "regular"}
        return self.dm(user_id, "", sticker=sticker)

    def press(self, user_id: int, message: dict, data: str) -> dict:
        """`user_id` presses the button carrying `data` under a bot message."""
        query = {
            "id": f"cq{next(self._ids)}",
            "from": self.person(user_id),
            "chat_instance": "ci",
            "data": data,
            "message": self._message_json(message)
            | {"chat": {"id": message["chat_id"], "type": "private"}},
        }
        return self._push({"callback_query": query})

    def shown_to(self, chat_id: int) -> list[str]:
        return [m["text"] for m in self.sent if m["chat_id"] == chat_id]

    def messages_to(self, chat_id: int) -> list[dict]:
        return [m for m in self.sent if m["chat_id"] == chat_id]

    def buttons(self, message: dict) -> list[dict]:
        markup = message.get("reply_markup")
        if not markup:
            return []
        rows = markup["inline_keyboard"] if isinstance(markup, dict) else []
        return [b for row in rows for b in row]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 10) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() > deadline:
                shown = [m["text"][:80] for m in self.sent[-5:]]
                raise AssertionError(f"timed out; last sent={shown} rejected={self.rejected}")
            await asyncio.sleep(0.02)


class _ApiError(Exception):
    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


def _error(code: int, description: str) -> web.Response:
    return web.json_response(
        {"ok": False, "error_code": code, "description": description}, status=code
    )


def _decode(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


__all__ = ["BOT_ID", "BOT_USERNAME", "FakeTelegram", "html", "parse_html", "parse_markdown_v2"]
