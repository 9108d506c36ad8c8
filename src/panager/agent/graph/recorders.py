"""Event subscribers: structured JSON logs, per-user session recording, recent activity.

All three subscribe to the app's `EventEmitter` (see events.py for the order
of events in a turn). None of them may break a turn: the emitter logs and
swallows a subscriber's exception.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from panager.agent.graph.events import Event
from panager.services.sessions import SessionStore, header_record, private_dir

EVENT_LOG = logging.getLogger("panager.events")
SAFE_FIELDS = (
    "iteration", "model", "tool_calls", "name", "id", "status", "usage", "system_trigger"
)
BODY_FIELDS = ("text", "args", "result", "calls")  # message bodies: only when debugging
UNLOGGED = ("message_delta",)  # one per piece of streamed text: noise in a log
ACTIVITY_SIZE = 20
# An OAuth link's state lets whoever holds it link *their* account to the user's:
# it never goes into a log line or a session file.
SECRET_PARAMS = re.compile(r"\b(state|code)=[^&\s\"'\\]+")
TAIL_BYTES = 65_536


class JsonEventLog:
    """Logs each event as one JSON line on `panager.events` (bodies only at DEBUG level)."""

    def __init__(self, logger: logging.Logger = EVENT_LOG) -> None:
        self.log = logger

    def __call__(self, event: Event) -> None:
        """Log `event` when INFO is enabled for the events logger."""
        if event.type in UNLOGGED or not self.log.isEnabledFor(logging.INFO):
            return
        payload: dict[str, Any] = {
            "event": event.type,
            "user_id": event.user_id,
            "at": event.at.isoformat(),
        }
        payload.update({k: event.data[k] for k in SAFE_FIELDS if k in event.data})
        if self.log.isEnabledFor(logging.DEBUG):
            payload.update({k: event.data[k] for k in BODY_FIELDS if k in event.data})
        self.log.info(redact(json.dumps(payload, ensure_ascii=False, default=str)))


class SessionRecorder:
    """Appends every message of every turn to `$PANAGER_HOME/sessions/<user>.jsonl`.

    The file starts with a header line; each message line carries its id, the
    previous message's id (`parent_id`) and a timestamp (see services/sessions.py).
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._last: dict[int, str | None] = {}

    def __call__(self, event: Event) -> None:
        """Write the message this event completes, if any."""
        record = self._record(event)
        if record is not None:
            self._append(event.user_id, record, event.at)

    def _record(self, event: Event) -> dict | None:
        data = event.data
        if event.type == "agent_start" and data.get("text"):
            record = {"role": "user", "content": data["text"], "id": data.get("message_id")}
            return {**record, "name": "scheduler"} if data.get("system_trigger") else record
        if event.type == "message_end":
            record = {"role": "assistant", "content": data.get("text") or "", "id": data.get("id")}
            return {**record, "tool_calls": data["calls"]} if data.get("calls") else record
        if event.type == "tool_end":
            return {
                "role": "tool",
                "content": data.get("result"),
                "tool_call_id": data.get("id"),
                "name": data.get("name"),
                "status": data.get("status"),
                "id": None,
            }
        return None

    def _append(self, user_id: int, record: dict, at: datetime) -> None:
        path = self.store.recording_path(user_id)
        lines = []
        if user_id not in self._last:
            self._last[user_id] = _last_id(path)
        if not path.exists() or path.stat().st_size == 0:
            private_dir(path.parent)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            lines.append(header_record(user_id, at))
        msg_id = record.pop("id", None) or uuid.uuid4().hex
        head = {"type": "message", "id": msg_id, "parent_id": self._last[user_id]}
        lines.append({**head, "timestamp": at.isoformat(), **record})
        with path.open("a", encoding="utf-8") as fh:
            fh.writelines(
                redact(json.dumps(x, ensure_ascii=False, default=str)) + "\n" for x in lines
            )
        self._last[user_id] = msg_id


def redact(text: str) -> str:
    """`text` with OAuth `state=`/`code=` values replaced by a marker."""
    return SECRET_PARAMS.sub(lambda m: f"{m.group(1)}=[redacted]", text)


def _last_id(path: Path) -> str | None:
    """The id of the last message in an existing recording (read from its tail)."""
    if not path.exists():
        return None
    with path.open("rb") as fh:
        fh.seek(max(path.stat().st_size - TAIL_BYTES, 0), os.SEEK_SET)
        tail = fh.read().decode("utf-8", "replace").splitlines()
    for line in reversed(tail):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "message":
            return obj.get("id")
    return None


@dataclass(frozen=True)
class Action:
    """One recent action of a user, for /debug."""

    at: datetime
    text: str


class ActivityLog:
    """The last few model calls and tool runs per user (in memory, for /debug)."""

    def __init__(self, size: int = ACTIVITY_SIZE) -> None:
        self._actions: dict[int, deque[Action]] = defaultdict(lambda: deque(maxlen=size))
        self._started: dict[str, datetime] = {}

    def __call__(self, event: Event) -> None:
        """Remember model replies and tool results."""
        data = event.data
        if event.type == "tool_start":
            self._started[str(data.get("id"))] = event.at
        elif event.type == "tool_end":
            start = self._started.pop(str(data.get("id")), event.at)
            ms = (event.at - start).total_seconds() * 1000
            text = f"tool {data.get('name')} → {data.get('status')} ({ms:.0f} ms)"
            self._actions[event.user_id].append(Action(event.at, text))
        elif event.type == "message_end" and data.get("model"):
            usage = data.get("usage") or {}
            calls = ", ".join(data.get("tool_calls") or []) or "answer"
            text = (
                f"model {data['model']} → {calls} "
                f"({usage.get('input_tokens', '?')} in / {usage.get('output_tokens', '?')} out)"
            )
            self._actions[event.user_id].append(Action(event.at, text))

    def recent(self, user_id: int) -> list[Action]:
        """The user's recent actions, oldest first."""
        return list(self._actions.get(user_id, ()))
