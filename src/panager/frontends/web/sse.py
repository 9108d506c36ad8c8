"""A turn's events as Server-Sent Events for the chat page.

The chat page consumes: `tool` (a tool started or finished), `delta` (a new
chunk of the answer being written, from `message_delta`), `reset` (discard
the text shown for an iteration, from `message_reset`), `message` (a model
reply's full text, from `message_end`) and finally `done` (the turn's answer,
ok flag and link). Until the model streams, `message` alone carries the
answer; with streaming, `delta` frames arrive first.
"""

from __future__ import annotations

import json
from typing import Any

from panager.agent.graph.events import Event


def frame(name: str, data: dict[str, Any]) -> bytes:
    """One SSE frame (data is JSON on one line)."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def translate(event: Event) -> bytes | None:
    """The frame for one lifecycle event, or None for events the page does not show."""
    data = event.data
    if event.type == "tool_start":
        return frame("tool", {"id": data.get("id"), "name": data.get("name"), "state": "running"})
    if event.type == "tool_end":
        state = "error" if data.get("status") == "error" else "done"
        return frame("tool", {"id": data.get("id"), "name": data.get("name"), "state": state})
    if event.type == "message_delta":
        return frame("delta", {"iteration": data.get("iteration", 0),
                               "text": data.get("text") or ""})
    if event.type == "message_reset":
        reset: dict[str, Any] = {"iteration": data.get("iteration", 0)}
        if data.get("restarted_on"):
            reset["restarted_on"] = data["restarted_on"]  # a fallback model writes it again
        return frame("reset", reset)
    if event.type == "message_end":
        return frame("message", {"iteration": data.get("iteration", 0),
                                 "text": data.get("text") or "",
                                 "final": not data.get("tool_calls")})
    return None
