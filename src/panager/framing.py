"""Outside content: text that did not come from the person, framed once where it enters.

Google event and task fields, relayed messages, web pages, search results, MCP
results, attachments, mail and webhook payloads reach the model only through
`frame`: a tag naming the source around the data, serialised as JSON with every
`<` escaped, so nothing inside can close the tag or open a new one. The tag is
also the mark the agent reads to decide whether a model call is *tainted*
(`holds_outside`): one helper frames, one test decides, and nothing needs a
registry of which tools read outside text.

A person who types the tag themselves only makes their own turn more careful.
"""

from __future__ import annotations

import json
import re
from typing import Any

OUTSIDE_TAG = "outside_content"
# The mark, in `additional_kwargs`, of a message written in a tainted model call (set and
# read by agent/graph/taint.py; kept by a saved conversation file, services/sessions.py).
TAINT_KEY = "panager_tainted"
OUTSIDE_OPEN = f"<{OUTSIDE_TAG}"
_SOURCE_UNSAFE = re.compile(r"[^\w .,:/@#+()'-]", re.UNICODE)
MAX_SOURCE_CHARS = 120


def quoted_json(value: Any) -> str:
    """`value` as JSON that cannot close a tag: each `<` written as `\\u003c` (valid JSON)."""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c")


def clean_source(source: str) -> str:
    """A short, tag-safe label for where the content came from."""
    label = _SOURCE_UNSAFE.sub("_", " ".join(str(source).split()))
    return label[:MAX_SOURCE_CHARS] or "unknown"


def frame(source: str, value: Any) -> str:
    """Outside content as quoted data with its source: `<outside_content source="…">JSON</…>`.

    `value` may be a string (quoted as a JSON string) or any JSON-able structure (kept
    as JSON, so ids and fields stay readable). Frame a tool result once, whole."""
    return (
        f'<{OUTSIDE_TAG} source="{clean_source(source)}">{quoted_json(value)}</{OUTSIDE_TAG}>'
    )


_FRAMED = re.compile(rf'^<{OUTSIDE_TAG} source="([^"]*)">(.*)</{OUTSIDE_TAG}>$', re.DOTALL)


def unframe(text: str) -> tuple[str, Any] | None:
    """(source, value) of a text that is exactly one frame; None otherwise."""
    found = _FRAMED.match(text) if isinstance(text, str) else None
    if found is None:
        return None
    try:
        return found.group(1), json.loads(found.group(2))
    except ValueError:
        return None


def holds_outside(text: Any) -> bool:
    """Whether `text` (a string or message content parts) carries framed outside content."""
    if isinstance(text, str):
        return OUTSIDE_OPEN in text
    if isinstance(text, list):
        return any(holds_outside(part) for part in text)
    if isinstance(text, dict):
        return any(holds_outside(v) for v in text.values() if isinstance(v, str | list | dict))
    return False


def quoted_for_person(header: str, text: str) -> str:
    """Outside words as a person is shown them: a header naming their origin, then the text
    inside a code block, where chat apps render no masked link, heading, mention or
    formatting — so nothing in it can pass for Panager's own words. Backtick runs are
    broken up so the text cannot close the block."""
    fenced = text.replace("`", "`\u200b")
    return f"{header}\n```\n{fenced}\n```"
