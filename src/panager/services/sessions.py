"""Conversations as JSONL files: the live recording, `/save`, `/load`, `/sessions`.

Format (one JSON object a line, UTF-8):

    {"type": "session", "version": 2, "user_id": 42, "created_at": "…", "summary": "…",
     "summary_tainted": false}
    {"type": "message", "id": "…", "parent_id": null, "timestamp": "…", "role": "user",
     "content": "…"}
    {"type": "message", "id": "…", "parent_id": "…", "timestamp": "…", "role": "assistant",
     "content": "", "tool_calls": [{"id": "call_1", "name": "task_list", "args": {}}],
     "tainted": false}
    {"type": "message", "id": "…", "parent_id": "…", "timestamp": "…", "role": "tool",
     "content": "…", "tool_call_id": "call_1", "name": "task_list", "status": "success"}

The first line is the header; every other line is one message whose
`parent_id` is the previous message's id.

The file keeps the taint of what it holds (agent/graph/taint.py): `summary_tainted`
says the summary was written from outside content, and `tainted` on a message
is its mark (written on every assistant line, on other lines only when set;
framed outside content stays framed in the text itself). A file that does not
say (version 1, a hand-written line) never comes back more trusted than it
could have been: a summary counts as tainted unless the header says
`"summary_tainted": false`, and an assistant message unless its line says
`"tainted": false`. `$PANAGER_HOME/sessions/<user>.jsonl`
is the live recording (appended by `SessionRecorder`); saved conversations are
`$PANAGER_HOME/sessions/<user>/<name>.jsonl`, so one user never sees another's.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from panager.framing import TAINT_KEY

VERSION = 2
MAX_SESSION_BYTES = 5_000_000
MAX_NAME = 64
ROLES = {"user": HumanMessage, "assistant": AIMessage, "tool": ToolMessage}


class SessionFormatError(ValueError):
    """A session file that cannot be loaded; `line` is 1-based (0: the file as a whole)."""

    def __init__(self, line: int, reason: str) -> None:
        where = f"line {line}: " if line else ""
        super().__init__(f"{where}{reason}")
        self.line = line
        self.reason = reason


@dataclass
class Session:
    """A parsed session file."""

    header: dict[str, Any]
    messages: list[AnyMessage] = field(default_factory=list)
    unmarked: bool = False  # an assistant line did not say whether it was tainted

    @property
    def summary(self) -> str | None:
        """The running summary saved with the conversation, if any."""
        value = self.header.get("summary")
        return value if isinstance(value, str) and value else None

    @property
    def summary_tainted(self) -> bool:
        """Whether the summary counts as written from outside content: unless the header
        says `false`, it does (an older file cannot vouch for it)."""
        return self.summary is not None and self.header.get("summary_tainted") is not False

    @property
    def assumed_tainted(self) -> bool:
        """Whether some of the file counts as tainted only because the file does not say."""
        unsaid = self.summary is not None and "summary_tainted" not in self.header
        return unsaid or self.unmarked


def sanitize_name(name: str) -> str:
    """A safe file stem: letters, digits, '.', '_' and '-' only; no leading dots; ≤ 64 chars."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name.strip())
    cleaned = re.sub(r"-{2,}", "-", cleaned).strip(".-_")
    return cleaned[:MAX_NAME].rstrip(".-_")


def header_record(
    user_id: int, created_at: datetime, summary: str | None = None, summary_tainted: bool = False
) -> dict:
    """The first line of a session file."""
    header: dict[str, Any] = {
        "type": "session",
        "version": VERSION,
        "user_id": user_id,
        "created_at": created_at.isoformat(),
    }
    if summary:
        header["summary"] = summary
        header["summary_tainted"] = bool(summary_tainted)
    return header


def message_record(
    msg: AnyMessage, *, id: str, parent_id: str | None, timestamp: datetime
) -> dict | None:
    """One message line; None for kinds that are not stored (system, removals)."""
    base: dict[str, Any] = {
        "type": "message", "id": id, "parent_id": parent_id, "timestamp": timestamp.isoformat()
    }
    content = msg.content if isinstance(msg.content, str) else msg.text
    tainted = bool((msg.additional_kwargs or {}).get(TAINT_KEY))
    mark = {"tainted": True} if tainted else {}
    if isinstance(msg, HumanMessage):
        record = {**base, "role": "user", "content": content}
        if msg.name:
            record["name"] = msg.name
        return {**record, **mark}
    if isinstance(msg, AIMessage):
        calls = [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in msg.tool_calls]
        record = {**base, "role": "assistant", "content": content}
        if calls:
            record["tool_calls"] = calls
        return {**record, "tainted": tainted}  # always said: a line without it loads tainted
    if isinstance(msg, ToolMessage):
        return {
            **base,
            "role": "tool",
            "content": content,
            "tool_call_id": msg.tool_call_id,
            "name": msg.name,
            "status": msg.status,
            **mark,
        }
    return None


def dump_session(
    user_id: int,
    messages: Sequence[AnyMessage],
    summary: str | None,
    now: datetime,
    *,
    summary_tainted: bool,
) -> str:
    """A whole conversation as JSONL text (header + one line per message), taint kept."""
    header = header_record(user_id, now, summary, summary_tainted)
    lines = [json.dumps(header, ensure_ascii=False)]
    parent = None
    for msg in messages:
        msg_id = msg.id or uuid.uuid4().hex
        record = message_record(msg, id=msg_id, parent_id=parent, timestamp=now)
        if record is not None:
            lines.append(json.dumps(record, ensure_ascii=False, default=str))
            parent = msg_id
    return "\n".join(lines) + "\n"


def parse_session(text: str) -> Session:
    """Parse JSONL text; any problem raises SessionFormatError naming the line."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise SessionFormatError(1, "the file is empty; expected a session header")
    header = _json_line(lines[0], 1)
    if header.get("type") != "session":
        raise SessionFormatError(1, 'expected a header object with "type": "session"')
    session = Session(header)
    for number, line in enumerate(lines[1:], start=2):
        if line.strip():
            obj = _json_line(line, number)
            session.messages.append(_message(obj, number))
            session.unmarked |= obj.get("role") == "assistant" and "tainted" not in obj
    return session


def _json_line(line: str, number: int) -> dict:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SessionFormatError(number, f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise SessionFormatError(number, "expected a JSON object")
    return value


def _message(obj: dict, number: int) -> AnyMessage:
    role = obj.get("role")
    if obj.get("type") != "message" or role not in ROLES:
        raise SessionFormatError(
            number, 'expected a message with role "user", "assistant" or "tool"'
        )
    content = obj.get("content")
    if not isinstance(content, str):
        raise SessionFormatError(number, '"content" must be a string')
    msg_id = obj.get("id") if isinstance(obj.get("id"), str) else None
    msg_id = msg_id[:128] if msg_id else uuid.uuid4().hex
    marks = _marks(obj, role)
    try:
        if role == "user":
            return HumanMessage(content, id=msg_id, name=obj.get("name"), additional_kwargs=marks)
        if role == "assistant":
            calls = [_tool_call(c, number) for c in obj.get("tool_calls") or []]
            return AIMessage(content, id=msg_id, tool_calls=calls, additional_kwargs=marks)
        return ToolMessage(
            content,
            id=msg_id,
            tool_call_id=str(obj["tool_call_id"]),
            name=obj.get("name"),
            status="error" if obj.get("status") == "error" else "success",
            additional_kwargs=marks,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionFormatError(number, f"invalid {role} message ({exc})") from None


def _marks(obj: dict, role: str) -> dict[str, Any]:
    """The loaded message's taint mark: as the line says; an assistant line that says
    nothing (or anything but `false`) counts as tainted."""
    tainted = obj.get("tainted", role == "assistant") is not False
    return {TAINT_KEY: True} if tainted else {}


def _tool_call(call: Any, number: int) -> dict:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise SessionFormatError(number, "each tool call needs a name, an id and args")
    args = call.get("args") or {}
    if not isinstance(args, dict):
        raise SessionFormatError(number, "tool call args must be a JSON object")
    return {"name": call["name"], "args": args, "id": str(call.get("id") or uuid.uuid4().hex)}


@dataclass(frozen=True)
class SavedSession:
    """A saved conversation file."""

    name: str
    path: Path
    size: int
    modified: float


class SessionLimit(ValueError):
    """A /save that would pass the user's cap on saved conversations (count or bytes)."""


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) readable by this account only (0700)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to a file only this account can read (0600), atomically."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    tmp.replace(path)


class SessionStore:
    """Saved conversations under `$PANAGER_HOME/sessions/<user>/`, one directory per user.

    The directory is 0700 and every file 0600: conversations are private."""

    def __init__(
        self, home: Path, *, max_files: int = 50, max_bytes: int = 20_000_000
    ) -> None:
        self.root = home / "sessions"
        self.max_files = max_files
        self.max_bytes = max_bytes

    def recording_path(self, user_id: int) -> Path:
        """The live recording of a user's conversation."""
        return self.root / f"{int(user_id)}.jsonl"

    def _dir(self, user_id: int) -> Path:
        return self.root / str(int(user_id))

    def path(self, user_id: int, name: str) -> Path:
        """Where `name` is saved for this user (the name must be sanitised already)."""
        if not name or name != sanitize_name(name):
            raise ValueError(f"invalid session name {name!r}")
        return self._dir(user_id) / f"{name}.jsonl"

    def save(self, user_id: int, name: str, text: str) -> Path:
        """Write a session file (replacing one of the same name); SessionLimit past the caps."""
        path = self.path(user_id, name)
        self._check_caps(user_id, name, len(text.encode("utf-8")))
        private_dir(self.root)
        private_dir(path.parent)
        write_private(path, text)
        return path

    def _check_caps(self, user_id: int, name: str, size: int) -> None:
        others = [s for s in self.list(user_id) if s.name != name]
        if len(others) >= self.max_files:
            raise SessionLimit(
                f"you have {len(others)} saved conversations, the limit "
                f"(saved_sessions_max); delete old ones first"
            )
        total = sum(s.size for s in others) + size
        if total > self.max_bytes:
            raise SessionLimit(
                f"saving this would use {total / 1_000_000:.1f} MB of the "
                f"{self.max_bytes / 1_000_000:.1f} MB allowed per user (saved_sessions_max_bytes)"
            )

    def read(self, user_id: int, name: str) -> str:
        """The text of a saved session; FileNotFoundError when absent; ValueError when huge."""
        path = self.path(user_id, name)
        if path.stat().st_size > MAX_SESSION_BYTES:
            raise ValueError(f"{name} is larger than {MAX_SESSION_BYTES // 1_000_000} MB")
        return path.read_text(encoding="utf-8", errors="replace")

    def list(self, user_id: int) -> list[SavedSession]:
        """The user's saved sessions, newest first."""
        folder = self._dir(user_id)
        if not folder.is_dir():
            return []
        found = [
            SavedSession(p.stem, p, p.stat().st_size, p.stat().st_mtime)
            for p in folder.glob("*.jsonl")
            if p.is_file()
        ]
        return sorted(found, key=lambda s: s.modified, reverse=True)
