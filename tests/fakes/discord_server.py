"""A local fake Discord (gateway websocket + REST API) for end-to-end tests.

The real ``discord.py`` client connects to it: :meth:`FakeDiscord.patch_discord`
points ``discord.http.Route.BASE`` and ``DiscordWebSocket.DEFAULT_GATEWAY`` at this
server. Tests then play the users (:meth:`FakeDiscord.send_dm`,
:meth:`FakeDiscord.send_slash_command`, ...) and inspect what the bot did through
the recorded lists (``sent``, ``edits``, ``deletions``, ``typing``, ``commands``,
``interactions``).

Typical use::

    async with FakeDiscord() as fake:
        with fake.patch_discord():
            task = asyncio.create_task(client.start("token"))
            await fake.wait_until_ready()
            await fake.send_dm(42, "hello")
            replies = await fake.wait_for_messages(42, 1)
            await client.close()
            await task

Behaviour worth knowing:

* REST responses carry ``Content-Type: application/json`` exactly (discord.py does
  not parse JSON served with a charset parameter). Gateway frames are text frames.
* The DM channel of user ``U`` is ``900000 + U`` (see :func:`dm_channel_id`).
* Events dispatched while no client is connected (e.g. inside the ``during``
  callback of :meth:`FakeDiscord.disconnect_and_resume`) are logged and replayed
  when the client RESUMEs, as Discord does; a client that IDENTIFYs anew never
  gets them, but the DMs stay readable in the channel history
  (``GET /channels/{id}/messages``).
* ``POST /channels/{id}/messages`` enforces Discord's rules that matter to a bot:
  content over 2000 characters or an empty message is a 400, and a repeated
  ``nonce`` with ``enforce_nonce`` returns the first message instead of a new one.
* Any route the fake does not know answers 404 and is recorded in ``unhandled``.
* :attr:`FakeDiscord.after_create` (an async callable taking the created message) runs
  after a bot message is stored and before the response goes back: a test can hold the
  response there to play "Discord posted it, the bot never heard back" (a crash mid-send).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import json
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import yarl
from aiohttp import WSMsgType, web

JSON_TYPE = "application/json"
DISCORD_EPOCH_MS = 1_420_070_400_000
DM_CHANNEL_BASE = 900_000
MAX_CONTENT = 2000
RESUMABLE_CLOSE_CODE = 4000
AUTHENTICATION_FAILED = 4004
EPHEMERAL_FLAG = 64
_API_PREFIX = "/api/v10"

Payload = dict[str, Any]


def dm_channel_id(user_id: int) -> int:
    """The stable id of the DM channel between the bot and ``user_id``."""
    return DM_CHANNEL_BASE + user_id


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON response whose Content-Type has no charset parameter."""
    body = json.dumps(data).encode()
    return web.Response(body=body, status=status, headers={"Content-Type": JSON_TYPE})


def error_response(status: int, code: int, message: str) -> web.Response:
    """A Discord-style JSON error."""
    return json_response({"code": code, "message": message}, status=status)


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat(timespec="microseconds")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _user_payload(user_id: int, username: str, *, bot: bool = False) -> Payload:
    return {
        "id": str(user_id),
        "username": username,
        "discriminator": "0",
        "global_name": username,
        "avatar": None,
        "bot": bot,
        "flags": 0,
        "public_flags": 0,
    }


def _option_type(value: Any) -> int:
    """The application-command option type Discord would use for ``value``."""
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return 4
    if isinstance(value, float):
        return 10
    return 3


class _Snowflakes:
    """Generates increasing snowflakes whose timestamp is the current time."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._last = 0

    def next(self) -> int:
        millis = int(time.time() * 1000) - DISCORD_EPOCH_MS
        value = max((millis << 22) | (next(self._counter) & 0xFFF), self._last + 1)
        self._last = value
        return value


class _Session:
    """One gateway session: its id, its sequence numbers and its event log."""

    def __init__(self) -> None:
        self.session_id = uuid.uuid4().hex
        self.seq = 0
        self.log: list[Payload] = []

    def record(self, event: str, data: Payload) -> Payload:
        self.seq += 1
        frame = {"op": 0, "t": event, "s": self.seq, "d": data}
        self.log.append(frame)
        return frame

    def after(self, seq: int | None) -> list[Payload]:
        return [frame for frame in self.log if frame["s"] > (seq or 0)]


class _Gateway:
    """Gateway side of the fake: sessions, dispatch, resume and heartbeats."""

    def __init__(self, fake: FakeDiscord, heartbeat_interval_ms: int) -> None:
        self.fake = fake
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session: _Session | None = None
        self.ws: web.WebSocketResponse | None = None
        self.sockets: set[web.WebSocketResponse] = set()
        self.open_gate = asyncio.Event()
        self.open_gate.set()
        self.ready = asyncio.Event()
        self.resumed = asyncio.Event()
        self.identifies: list[Payload] = []
        self.resumes: list[Payload] = []
        self.heartbeats = 0
        self.stopping = False

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        self.sockets.add(ws)
        try:
            await self.open_gate.wait()
            if not self.stopping:
                await self._serve(ws)
        finally:
            self.sockets.discard(ws)
            if self.ws is ws:  # the client left (not a scripted resumable disconnect)
                self.ws = None
                self.ready.clear()
        return ws

    async def _serve(self, ws: web.WebSocketResponse) -> None:
        await self._send(ws, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        async for msg in ws:
            if msg.type is WSMsgType.TEXT:
                await self._on_frame(ws, json.loads(msg.data))

    async def _on_frame(self, ws: web.WebSocketResponse, frame: Payload) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op == 1:
            self.heartbeats += 1
            await self._send(ws, {"op": 11})
        elif op == 2:
            await self._identify(ws, data)
        elif op == 6:
            await self._resume(ws, data)

    async def _identify(self, ws: web.WebSocketResponse, data: Payload) -> None:
        self.identifies.append(data)
        if self.fake.token and data.get("token") != self.fake.token:
            await ws.close(code=AUTHENTICATION_FAILED, message=b"Authentication failed.")
            return
        self.session = _Session()
        self.ws = ws
        await self.dispatch("READY", self.fake._ready_payload(self.session.session_id))
        for guild in self.fake._guilds.values():
            await self.dispatch("GUILD_CREATE", guild)
        self.ready.set()

    async def _resume(self, ws: web.WebSocketResponse, data: Payload) -> None:
        self.resumes.append(data)
        session = self.session
        if session is None or data.get("session_id") != session.session_id:
            await self._send(ws, {"op": 9, "d": False})
            return
        self.ws = ws
        for frame in session.after(data.get("seq")):
            await self._send(ws, frame)
        await self.dispatch("RESUMED", {})
        self.resumed.set()

    async def dispatch(self, event: str, data: Payload) -> None:
        """Log an event in the session and send it if a client is connected."""
        if self.session is None:
            raise RuntimeError("no client has identified with the fake gateway yet")
        frame = self.session.record(event, data)
        if self.ws is not None and not self.ws.closed:
            await self._send(self.ws, frame)

    async def disconnect(self) -> None:
        """Close the client's socket resumably and hold new connections."""
        ws = self.ws
        if ws is None:
            raise RuntimeError("no client is connected to the fake gateway")
        self.open_gate.clear()
        self.resumed.clear()
        self.ws = None
        await ws.close(code=RESUMABLE_CLOSE_CODE, message=b"fake: please resume")

    async def close_all(self) -> None:
        self.stopping = True
        self.open_gate.set()
        for ws in list(self.sockets):
            await ws.close(code=1001, message=b"fake: shutting down")

    @staticmethod
    async def _send(ws: web.WebSocketResponse, frame: Payload) -> None:
        with contextlib.suppress(ConnectionResetError):
            await ws.send_str(json.dumps(frame))


class FakeDiscord:
    """A fake Discord API and gateway on 127.0.0.1 for the real discord.py client.

    ``token``: if given, REST calls must present ``Bot <token>`` or get a 401.
    ``heartbeat_interval_ms``: the interval sent in HELLO.
    """

    def __init__(
        self,
        bot_user_id: int = 1000,
        app_id: int = 1000,
        *,
        bot_name: str = "panager",
        token: str | None = None,
        heartbeat_interval_ms: int = 41_250,
    ) -> None:
        self.bot_user_id = bot_user_id
        self.app_id = app_id
        self.bot_name = bot_name
        self.token = token
        self.sent: list[Payload] = []
        self.edits: list[Payload] = []
        self.deletions: list[Payload] = []
        self.typing: list[int] = []
        self.commands: list[Payload] = []
        self.guild_commands: dict[int, list[Payload]] = {}
        self.interactions: list[Payload] = []
        self.unhandled: list[tuple[str, str]] = []
        self.after_create: Callable[[Payload], Awaitable[None]] | None = None
        self._ids = _Snowflakes()
        self._users: dict[int, Payload] = {bot_user_id: self.bot_user}
        self._messages: dict[int, Payload] = {}
        self._guilds: dict[int, Payload] = {}
        self._channel_guilds: dict[int, int] = {}
        self._files: dict[str, tuple[bytes, str]] = {}
        self._interaction_users: dict[str, int] = {}
        self._hook_messages: dict[str, list[int]] = {}
        self._nonces: dict[tuple[int, str], int] = {}
        self._last_message_create: Payload | None = None
        self._activity = asyncio.Event()
        self._gateway = _Gateway(self, heartbeat_interval_ms)
        self._runner: web.AppRunner | None = None
        self._port = 0

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start serving on a free port of 127.0.0.1."""
        self._runner = web.AppRunner(self._build_app(), handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        """Close every websocket and stop the server."""
        if self._runner is None:
            return
        await self._gateway.close_all()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def rest_base(self) -> str:
        """The value for ``discord.http.Route.BASE``."""
        return self.base_url + _API_PREFIX

    @property
    def gateway_url(self) -> str:
        """The gateway websocket URL (also sent as ``resume_gateway_url``)."""
        return f"ws://127.0.0.1:{self._port}/gateway"

    @contextlib.contextmanager
    def patch_discord(self) -> Iterator[FakeDiscord]:
        """Point discord.py's REST base and default gateway at this fake, then restore."""
        from discord.gateway import DiscordWebSocket
        from discord.http import Route

        saved = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
        Route.BASE = self.rest_base
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)
        try:
            yield self
        finally:
            Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = saved

    # ------------------------------------------------------------------- gateway

    @property
    def identifies(self) -> list[Payload]:
        """The ``d`` of every IDENTIFY received (token, intents, properties, ...)."""
        return self._gateway.identifies

    @property
    def resumes(self) -> list[Payload]:
        """The ``d`` of every RESUME received (token, session_id, seq)."""
        return self._gateway.resumes

    @property
    def heartbeats(self) -> int:
        """How many heartbeats (op 1) were acknowledged."""
        return self._gateway.heartbeats

    async def wait_until_ready(self, timeout: float = 10) -> None:
        """Wait until a client has IDENTIFYed and been sent READY."""
        await asyncio.wait_for(self._gateway.ready.wait(), timeout)

    async def dispatch(self, event: str, data: Payload) -> None:
        """Dispatch any gateway event (op 0) to the connected client."""
        await self._gateway.dispatch(event, data)

    async def disconnect_and_resume(
        self,
        during: Callable[[], Awaitable[Any]] | None = None,
        timeout: float = 10,
    ) -> None:
        """Close the socket with a resumable code and wait until the client RESUMEd.

        New connections are held (no HELLO) while ``during`` runs, so events it
        dispatches are missed by the client and replayed on RESUME.
        """
        await self._gateway.disconnect()
        try:
            if during is not None:
                await during()
        finally:
            self._gateway.open_gate.set()
        await asyncio.wait_for(self._gateway.resumed.wait(), timeout)

    def _ready_payload(self, session_id: str) -> Payload:
        return {
            "v": 10,
            "user": self.bot_user,
            "guilds": [{"id": str(gid), "unavailable": True} for gid in self._guilds],
            "session_id": session_id,
            "resume_gateway_url": self.gateway_url,
            "shard": [0, 1],
            "application": {"id": str(self.app_id), "flags": 0},
            "private_channels": [],
            "relationships": [],
        }

    # --------------------------------------------------------------------- users

    @property
    def bot_user(self) -> Payload:
        """The bot's user object."""
        return {**_user_payload(self.bot_user_id, self.bot_name, bot=True), "verified": True}

    def user(self, user_id: int, username: str | None = None) -> Payload:
        """The user object of ``user_id`` (created on first use; renamed if given)."""
        known = self._users.get(user_id)
        if known is None or (username is not None and known["username"] != username):
            known = _user_payload(user_id, username or f"user{user_id}")
            self._users[user_id] = known
        return known

    def _dm_channel(self, user_id: int) -> Payload:
        return {
            "id": str(dm_channel_id(user_id)),
            "type": 1,
            "recipients": [self.user(user_id)],
            "last_message_id": None,
            "flags": 0,
        }

    def _recipient(self, channel_id: int) -> int | None:
        user_id = channel_id - DM_CHANNEL_BASE
        if channel_id in self._channel_guilds or user_id not in self._users:
            return None
        return user_id if user_id != self.bot_user_id else None

    # --------------------------------------------------------------- user events

    async def send_dm(
        self,
        user_id: int,
        content: str,
        *,
        username: str | None = None,
        message_id: int | None = None,
        attachments: list[Any] | None = None,
        sticker: bool = False,
        voice: bool = False,
        forwarded: list[Any] | None = None,
        forwarded_voice: bool = False,
    ) -> int:
        """Dispatch a MESSAGE_CREATE of a DM from ``user_id``; return the message id.

        ``attachments``: file names, or dicts with ``filename`` and optionally
        ``data`` (bytes, served at the attachment's URL), ``content_type`` and ``url``
        (served elsewhere). ``voice``: the message is a voice message (flag 1 << 13).
        ``forwarded``: attachments of a forwarded message (``message_snapshots``), a voice
        message when ``forwarded_voice``.
        """
        data = self._incoming(user_id, dm_channel_id(user_id), content, message_id, username)
        data["channel_type"] = 1
        data["attachments"] = [self._attachment(a, data["channel_id"]) for a in attachments or []]
        if voice:
            data["flags"] = 1 << 13
        if forwarded is not None:
            data["message_reference"] = {"type": 1, "channel_id": data["channel_id"],
                                         "message_id": str(self._ids.next())}
            data["message_snapshots"] = [{"message": {
                "type": 0, "content": "", "embeds": [], "timestamp": data["timestamp"],
                "edited_timestamp": None, "flags": (1 << 13) if forwarded_voice else 0,
                "attachments": [self._attachment(a, data["channel_id"]) for a in forwarded],
            }}]
        if sticker:
            data["sticker_items"] = [
                {"id": str(self._ids.next()), "name": "wave", "format_type": 1}
            ]
        await self._dispatch_message(data)
        return int(data["id"])

    async def send_guild_message(
        self, user_id: int, content: str, guild_id: int = 5000, channel_id: int = 5001
    ) -> int:
        """Dispatch a MESSAGE_CREATE in a guild text channel; return the message id.

        The guild is announced with GUILD_CREATE first if the client does not know it.
        """
        await self._ensure_guild(guild_id, channel_id)
        data = self._incoming(user_id, channel_id, content, None, None)
        data.update(guild_id=str(guild_id), channel_type=0, member=self._member_payload())
        await self._dispatch_message(data)
        return int(data["id"])

    async def replay_last(self) -> None:
        """Dispatch the last MESSAGE_CREATE again, same message id (a RESUME replay)."""
        if self._last_message_create is None:
            raise RuntimeError("no MESSAGE_CREATE was dispatched yet")
        await self.dispatch("MESSAGE_CREATE", dict(self._last_message_create))

    async def send_slash_command(
        self, user_id: int, name: str, options: dict[str, Any] | None = None
    ) -> int:
        """Dispatch an INTERACTION_CREATE for ``/name`` in the user's DM; return its id.

        ``name`` may be ``"group sub"`` for a subcommand. Option types come from the
        registered command when synced, else from the Python type of each value.
        """
        interaction_id, token = self._ids.next(), uuid.uuid4().hex
        self._interaction_users[token] = user_id
        data = {
            "id": str(interaction_id),
            "application_id": str(self.app_id),
            "type": 2,
            "token": token,
            "version": 1,
            "data": self._command_data(name, options or {}),
            "channel_id": str(dm_channel_id(user_id)),
            "channel": self._dm_channel(user_id),
            "user": self.user(user_id),
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(user_id)},
            "context": 1,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        await self.dispatch("INTERACTION_CREATE", data)
        return interaction_id

    async def press_button(self, user_id: int, message: Payload, custom_id: str) -> int:
        """Dispatch an INTERACTION_CREATE for ``user_id`` pressing the button ``custom_id``
        on ``message`` (a message the bot sent in their DM); return the interaction id."""
        interaction_id, token = self._ids.next(), uuid.uuid4().hex
        self._interaction_users[token] = user_id
        self._hook_messages[token] = [int(message["id"])]  # @original: the pressed message
        data = {
            "id": str(interaction_id),
            "application_id": str(self.app_id),
            "type": 3,
            "token": token,
            "version": 1,
            "data": {"custom_id": custom_id, "component_type": 2},
            "message": message,
            "channel_id": str(dm_channel_id(user_id)),
            "channel": self._dm_channel(user_id),
            "user": self.user(user_id),
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(user_id)},
            "context": 1,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        await self.dispatch("INTERACTION_CREATE", data)
        return interaction_id

    def _incoming(
        self,
        user_id: int,
        channel_id: int,
        content: str,
        message_id: int | None,
        username: str | None,
    ) -> Payload:
        mid = message_id if message_id is not None else self._ids.next()
        return self._message_payload(mid, channel_id, self.user(user_id, username), content)

    async def _dispatch_message(self, data: Payload) -> None:
        self._last_message_create = data
        self._messages[int(data["id"])] = data  # in the channel's history, seen or not
        await self.dispatch("MESSAGE_CREATE", data)

    def _attachment(self, spec: Any, channel_id: str) -> Payload:
        spec = {"filename": spec} if isinstance(spec, str) else dict(spec)
        attachment_id, name = self._ids.next(), spec["filename"]
        content_type = spec.get("content_type", "application/octet-stream")
        data = spec.get("data", b"")
        path = f"/attachments/{channel_id}/{attachment_id}/{name}"
        self._files[path] = (data, content_type)
        url = spec.get("url") or self.base_url + path
        return {
            "id": str(attachment_id),
            "filename": name,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    def _member_payload(self) -> Payload:
        return {"roles": [], "joined_at": _iso(_now()), "deaf": False, "mute": False, "flags": 0}

    async def _ensure_guild(self, guild_id: int, channel_id: int) -> None:
        """Announce the guild (GUILD_CREATE) or the new channel (CHANNEL_CREATE)."""
        if channel_id in self._channel_guilds:
            return
        self._channel_guilds[channel_id] = guild_id
        channel = self._text_channel(guild_id, channel_id)
        guild = self._guilds.get(guild_id)
        if guild is not None:
            guild["channels"].append(channel)
            await self.dispatch("CHANNEL_CREATE", channel)
            return
        guild = self._guilds[guild_id] = self._guild_payload(guild_id)
        guild["channels"].append(channel)
        await self.dispatch("GUILD_CREATE", guild)

    def _guild_payload(self, guild_id: int) -> Payload:
        everyone = {"id": str(guild_id), "name": "@everyone", "permissions": "0", "position": 0}
        bot_member = {**self._member_payload(), "user": self.bot_user}
        return {
            "id": str(guild_id),
            "name": f"guild{guild_id}",
            "unavailable": False,
            "member_count": 2,
            "owner_id": "1",
            "roles": [everyone],
            "channels": [],
            "members": [bot_member],
            "threads": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "joined_at": _iso(_now()),
            "large": False,
        }

    @staticmethod
    def _text_channel(guild_id: int, channel_id: int) -> Payload:
        return {
            "id": str(channel_id),
            "type": 0,
            "guild_id": str(guild_id),
            "name": f"channel{channel_id}",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "last_message_id": None,
        }

    def _command_data(self, name: str, options: dict[str, Any]) -> Payload:
        top, *subs = name.split()
        registered = next((c for c in self.commands if c["name"] == top), None)
        schema = registered.get("options", []) if registered else []
        values = [self._option(key, value, schema) for key, value in options.items()]
        for sub in reversed(subs):
            values = [{"name": sub, "type": 1, "options": values}]
        command_id = registered["id"] if registered else str(self._ids.next())
        return {"id": command_id, "name": top, "type": 1, "options": values}

    @staticmethod
    def _option(key: str, value: Any, schema: list[Payload]) -> Payload:
        flat = list(_flatten_options(schema))
        known = next((o for o in flat if o["name"] == key), None)
        kind = known["type"] if known else _option_type(value)
        return {"name": key, "type": kind, "value": value}

    # ------------------------------------------------------------ bot's messages

    def messages_to(self, user_id: int) -> list[Payload]:
        """Messages the bot created in ``user_id``'s DM channel, in order."""
        channel_id = dm_channel_id(user_id)
        return [m for m in self.sent if m["channel_id"] == channel_id]

    def shown_to(self, user_id: int) -> list[str]:
        """What ``user_id`` sees now: the bot's messages to them, as last edited, in order."""
        return [
            self._messages[m["id"]]["content"]
            for m in self.messages_to(user_id)
            if m["id"] in self._messages
        ]

    def edits_of(self, message_id: int) -> list[Payload]:
        """The edits of one message, in order (each with its ``time``)."""
        return [e for e in self.edits if e["id"] == message_id]

    async def wait_for_messages(
        self,
        user_id: int,
        count: int,
        timeout: float = 10,
    ) -> list[Payload]:
        """Wait until the bot has sent ``count`` messages to ``user_id``; return them all."""
        try:
            await self.wait_for(lambda: len(self.messages_to(user_id)) >= count, timeout)
        except TimeoutError:
            got = [m["content"] for m in self.messages_to(user_id)]
            raise AssertionError(f"expected {count} messages to {user_id}, got {got!r}") from None
        return self.messages_to(user_id)

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 10) -> None:
        """Wait until ``condition()`` holds.

        It is re-checked whenever the fake records something: a message, an edit, a
        deletion, typing, an interaction response or a command sync.
        """
        async with asyncio.timeout(timeout):
            while True:
                self._activity.clear()
                if condition():
                    return
                await self._activity.wait()

    def _record(self, kind: list[Any], entry: Any) -> None:
        kind.append(entry)
        self._activity.set()

    def _message_payload(self, mid: int, channel_id: int, author: Payload, content: str) -> Payload:
        return {
            "id": str(mid),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": _iso(_now()),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }

    def _create_bot_message(self, channel_id: int, body: Payload, **extra: Any) -> Payload:
        """Store a message the bot created and record it in ``sent``."""
        message = self._message_payload(
            self._ids.next(), channel_id, self.bot_user, body.get("content") or ""
        )
        for key in ("embeds", "components", "nonce", "flags", "message_reference"):
            if body.get(key) is not None:
                message[key] = body[key]
        message["attachments"] = body.get("_attachments", [])
        self._messages[int(message["id"])] = message
        self._record(self.sent, self._sent_entry(message, body, **extra))
        return message

    def _sent_entry(self, message: Payload, body: Payload, **extra: Any) -> Payload:
        channel_id = int(message["channel_id"])
        return {
            "id": int(message["id"]),
            "channel_id": channel_id,
            "recipient_id": self._recipient(channel_id),
            "content": message["content"],
            "components": body.get("components") or [],
            "nonce": body.get("nonce"),
            "enforce_nonce": bool(body.get("enforce_nonce")),
            "embeds": body.get("embeds") or [],
            "flags": body.get("flags") or 0,
            "allowed_mentions": body.get("allowed_mentions"),
            "files": body.get("_files", []),
            "time": time.monotonic(),
            **extra,
        }

    def _edit_message(self, message: Payload, body: Payload, **extra: Any) -> Payload:
        for key in ("content", "embeds", "components", "flags"):
            if key in body:
                message[key] = body[key] if body[key] is not None else message[key]
        message["edited_timestamp"] = _iso(_now())
        entry = {
            "id": int(message["id"]),
            "channel_id": int(message["channel_id"]),
            "content": message["content"],
            "components": message["components"],
            "embeds": message["embeds"],
            "time": time.monotonic(),
            **extra,
        }
        self._record(self.edits, entry)
        return message

    def _delete_message(self, message: Payload, **extra: Any) -> None:
        del self._messages[int(message["id"])]
        entry = {"id": int(message["id"]), "channel_id": int(message["channel_id"])}
        self._record(self.deletions, {**entry, "time": time.monotonic(), **extra})

    # ---------------------------------------------------------------------- REST

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth_middleware])
        rest = _RestRoutes(self)
        app.router.add_get("/gateway", self._gateway.handle)
        app.router.add_get("/gateway/", self._gateway.handle)
        app.router.add_get("/attachments/{path:.*}", self._serve_file)
        for method, path, handler in rest.table():
            app.router.add_route(method, _API_PREFIX + path, handler)
        app.router.add_route("*", "/{tail:.*}", self._unhandled)
        return app

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        needs_auth = request.path.startswith(_API_PREFIX) and "/interactions/" not in request.path
        needs_auth = needs_auth and "/webhooks/" not in request.path
        authorized = request.headers.get("Authorization") == f"Bot {self.token}"
        if self.token and needs_auth and not authorized:
            return error_response(401, 0, "401: Unauthorized")
        return await handler(request)

    async def _serve_file(self, request: web.Request) -> web.Response:
        found = self._files.get(request.path)
        if found is None:
            return web.Response(status=404)
        data, content_type = found
        return web.Response(body=data, headers={"Content-Type": content_type})

    async def _unhandled(self, request: web.Request) -> web.Response:
        self.unhandled.append((request.method, request.path))
        return error_response(404, 0, "404: Not Found")


def _flatten_options(options: list[Payload]) -> Iterator[Payload]:
    """Every option in ``options``, descending into subcommands and groups."""
    for option in options:
        if option.get("type") in (1, 2):
            yield from _flatten_options(option.get("options", []))
        else:
            yield option


async def _read_body(request: web.Request) -> Payload:
    """Read a JSON or multipart (``payload_json`` + ``files[n]``) request body."""
    if not request.can_read_body:
        return {}
    if request.content_type != "multipart/form-data":
        return await request.json()
    form = await request.post()
    body = json.loads(str(form.get("payload_json", "{}")))
    files = [field for key, field in form.items() if key.startswith("files[")]
    body["_files"] = [
        {"filename": f.filename, "content_type": f.content_type, "data": f.file.read()}
        for f in files
    ]
    return body


class _RestRoutes:
    """Handlers of the REST API routes discord.py uses."""

    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake

    def table(self) -> list[tuple[str, str, Callable[[web.Request], Awaitable[web.Response]]]]:
        """(method, path under /api/v10, handler) for every supported route."""
        msg = "/channels/{channel_id}/messages/{message_id}"
        hook = "/webhooks/{app_id}/{token}/messages/{message_id}"
        return [
            ("GET", "/users/@me", self.get_me),
            ("GET", "/users/{user_id}", self.get_user),
            ("GET", "/oauth2/applications/@me", self.get_application),
            ("GET", "/applications/@me", self.get_application),
            ("GET", "/gateway", self.get_gateway),
            ("GET", "/gateway/bot", self.get_gateway),
            ("POST", "/users/@me/channels", self.create_dm),
            ("GET", "/channels/{channel_id}", self.get_channel),
            ("GET", "/channels/{channel_id}/messages", self.get_messages),
            ("POST", "/channels/{channel_id}/messages", self.create_message),
            ("GET", msg, self.get_message),
            ("PATCH", msg, self.edit_message),
            ("DELETE", msg, self.delete_message),
            ("POST", "/channels/{channel_id}/typing", self.typing),
            ("PUT", "/applications/{app_id}/commands", self.put_commands),
            ("GET", "/applications/{app_id}/commands", self.get_commands),
            ("PUT", "/applications/{app_id}/guilds/{guild_id}/commands", self.put_commands),
            ("GET", "/applications/{app_id}/guilds/{guild_id}/commands", self.get_commands),
            ("POST", "/interactions/{interaction_id}/{token}/callback", self.callback),
            ("POST", "/webhooks/{app_id}/{token}", self.followup),
            ("GET", hook, self.get_hook_message),
            ("PATCH", hook, self.edit_hook_message),
            ("DELETE", hook, self.delete_hook_message),
        ]

    # users, application, gateway

    async def get_me(self, request: web.Request) -> web.Response:
        return json_response(self.fake.bot_user)

    async def get_user(self, request: web.Request) -> web.Response:
        return json_response(self.fake.user(int(request.match_info["user_id"])))

    async def get_application(self, request: web.Request) -> web.Response:
        fake = self.fake
        return json_response(
            {
                "id": str(fake.app_id),
                "name": fake.bot_name,
                "description": "",
                "icon": None,
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": _user_payload(1, "owner"),
                "verify_key": "0" * 64,
                "flags": 0,
                "bot": fake.bot_user,
            }
        )

    async def get_gateway(self, request: web.Request) -> web.Response:
        limits = {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}
        return json_response({"url": self.fake.gateway_url, "shards": 1, **limits})

    # channels and messages

    async def create_dm(self, request: web.Request) -> web.Response:
        body = await request.json()
        return json_response(self.fake._dm_channel(int(body["recipient_id"])))

    async def get_channel(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        guild_id = self.fake._channel_guilds.get(channel_id)
        if guild_id is not None:
            return json_response(self.fake._text_channel(guild_id, channel_id))
        recipient = self.fake._recipient(channel_id)
        if recipient is None:
            return error_response(404, 10003, "Unknown Channel")
        return json_response(self.fake._dm_channel(recipient))

    def _known_channel(self, channel_id: int) -> bool:
        fake = self.fake
        return channel_id in fake._channel_guilds or fake._recipient(channel_id) is not None

    async def create_message(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        if not self._known_channel(channel_id):
            return error_response(404, 10003, "Unknown Channel")
        body = await _read_body(request)
        problem = _message_problem(body)
        if problem is not None:
            return problem
        existing = self._nonce_duplicate(channel_id, body)
        if existing is not None:
            return json_response(existing)
        body["_attachments"] = [_sent_attachment(self.fake, f) for f in body.get("_files", [])]
        message = self.fake._create_bot_message(channel_id, body)
        if body.get("enforce_nonce") and body.get("nonce") is not None:
            self.fake._nonces[(channel_id, str(body["nonce"]))] = int(message["id"])
        if self.fake.after_create is not None:
            await self.fake.after_create(message)
        return json_response(message)

    def _nonce_duplicate(self, channel_id: int, body: Payload) -> Payload | None:
        if not body.get("enforce_nonce") or body.get("nonce") is None:
            return None
        first = self.fake._nonces.get((channel_id, str(body["nonce"])))
        return self.fake._messages.get(first) if first is not None else None

    def _find(self, request: web.Request) -> Payload | None:
        message = self.fake._messages.get(int(request.match_info["message_id"]))
        if message is None or message["channel_id"] != request.match_info["channel_id"]:
            return None
        return message

    async def get_messages(self, request: web.Request) -> web.Response:
        """A channel's history like Discord: `limit` messages before/after an id, newest first."""
        channel = request.match_info["channel_id"]
        query = request.query
        limit = min(int(query.get("limit", 50)), 100)
        found = sorted(
            (m for m in self.fake._messages.values() if m["channel_id"] == channel),
            key=lambda m: int(m["id"]),
        )
        if "after" in query:
            found = [m for m in found if int(m["id"]) > int(query["after"])][:limit]
        else:
            if "before" in query:
                found = [m for m in found if int(m["id"]) < int(query["before"])]
            found = found[-limit:]
        return json_response(found[::-1])

    async def get_message(self, request: web.Request) -> web.Response:
        message = self._find(request)
        if message is None:
            return error_response(404, 10008, "Unknown Message")
        return json_response(message)

    async def edit_message(self, request: web.Request) -> web.Response:
        message = self._find(request)
        if message is None:
            return error_response(404, 10008, "Unknown Message")
        body = await _read_body(request)
        if len(body.get("content") or "") > MAX_CONTENT:
            return _too_long()
        return json_response(self.fake._edit_message(message, body))

    async def delete_message(self, request: web.Request) -> web.Response:
        message = self._find(request)
        if message is None:
            return error_response(404, 10008, "Unknown Message")
        self.fake._delete_message(message)
        return web.Response(status=204)

    async def typing(self, request: web.Request) -> web.Response:
        self.fake._record(self.fake.typing, int(request.match_info["channel_id"]))
        return web.Response(status=204)

    # application commands

    def _command_list(self, request: web.Request) -> list[Payload]:
        guild_id = request.match_info.get("guild_id")
        if guild_id is None:
            return self.fake.commands
        return self.fake.guild_commands.setdefault(int(guild_id), [])

    async def put_commands(self, request: web.Request) -> web.Response:
        stored = [self._stored_command(c, request) for c in await request.json()]
        target = self._command_list(request)
        target[:] = stored
        self.fake._activity.set()
        return json_response(stored)

    def _stored_command(self, command: Payload, request: web.Request) -> Payload:
        stored = {
            "id": str(self.fake._ids.next()),
            "application_id": str(self.fake.app_id),
            "version": str(self.fake._ids.next()),
            "type": 1,
            "description": "",
            "default_member_permissions": None,
            **command,
        }
        if "guild_id" in request.match_info:
            stored["guild_id"] = request.match_info["guild_id"]
        return stored

    async def get_commands(self, request: web.Request) -> web.Response:
        return json_response(self._command_list(request))

    # interactions

    async def callback(self, request: web.Request) -> web.Response:
        fake, token = self.fake, request.match_info["token"]
        user_id = fake._interaction_users.get(token)
        if user_id is None:
            return error_response(404, 10062, "Unknown interaction")
        body = await _read_body(request)
        interaction_id = int(request.match_info["interaction_id"])
        kind, data = body.get("type"), body.get("data") or {}
        fake._record(
            fake.interactions,
            {
                "interaction_id": interaction_id,
                "token": token,
                "type": kind,
                "data": data,
                "time": time.monotonic(),
            },
        )
        return json_response(self._callback_result(interaction_id, token, kind, data, user_id))

    def _callback_result(
        self, interaction_id: int, token: str, kind: int, data: Payload, user_id: int
    ) -> Payload:
        flags = int(data.get("flags") or 0)
        summary = {
            "id": str(interaction_id),
            "type": 2,
            "response_message_loading": kind == 5,
            "response_message_ephemeral": bool(flags & EPHEMERAL_FLAG),
        }
        result: Payload = {"interaction": summary, "resource": {"type": kind}}
        if kind == 4:
            message = self._interaction_message(token, user_id, data, interaction_id)
            summary["response_message_id"] = message["id"]
            result["resource"]["message"] = message
        return result

    def _interaction_message(
        self, token: str, user_id: int, body: Payload, interaction_id: int | None = None
    ) -> Payload:
        message = self.fake._create_bot_message(
            dm_channel_id(user_id), body, interaction_token=token, interaction_id=interaction_id
        )
        message.update(webhook_id=str(self.fake.app_id), application_id=str(self.fake.app_id))
        self.fake._hook_messages.setdefault(token, []).append(int(message["id"]))
        return message

    async def followup(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        user_id = self.fake._interaction_users.get(token)
        if user_id is None:
            return error_response(404, 10015, "Unknown Webhook")
        body = await _read_body(request)
        problem = _message_problem(body)
        if problem is not None:
            return problem
        return json_response(self._interaction_message(token, user_id, body))

    def _hook_message(self, request: web.Request) -> Payload | None:
        token, wanted = request.match_info["token"], request.match_info["message_id"]
        ids = self.fake._hook_messages.get(token, [])
        if wanted == "@original":
            ids = ids[:1]
        elif wanted.isdigit() and int(wanted) in ids:
            ids = [int(wanted)]
        else:
            ids = []
        return self.fake._messages.get(ids[0]) if ids else None

    async def get_hook_message(self, request: web.Request) -> web.Response:
        message = self._hook_message(request)
        if message is None:
            return error_response(404, 10008, "Unknown Message")
        return json_response(message)

    async def edit_hook_message(self, request: web.Request) -> web.Response:
        body = await _read_body(request)
        message = self._hook_message(request)
        token = request.match_info["token"]
        user_id = self.fake._interaction_users.get(token)
        if message is None and request.match_info["message_id"] == "@original" and user_id:
            return json_response(self._interaction_message(token, user_id, body))
        if message is None:
            return error_response(404, 10008, "Unknown Message")
        edited = self.fake._edit_message(message, body, interaction_token=token)
        return json_response(edited)

    async def delete_hook_message(self, request: web.Request) -> web.Response:
        message = self._hook_message(request)
        if message is None:
            return error_response(404, 10008, "Unknown Message")
        self.fake._delete_message(message, interaction_token=request.match_info["token"])
        return web.Response(status=204)


def _too_long() -> web.Response:
    return error_response(400, 50035, f"Invalid Form Body: content must be {MAX_CONTENT} or fewer")


def _message_problem(body: Payload) -> web.Response | None:
    """The error Discord would answer for this message body, if any."""
    content = body.get("content") or ""
    if len(content) > MAX_CONTENT:
        return _too_long()
    has_other = any(body.get(k) for k in ("embeds", "components", "sticker_ids", "_files", "poll"))
    if not content.strip() and not has_other:
        return error_response(400, 50006, "Cannot send an empty message")
    return None


def _sent_attachment(fake: FakeDiscord, file: Payload) -> Payload:
    """The attachment object of a file the bot uploaded (served back by the fake)."""
    return fake._attachment(file, "uploads")
