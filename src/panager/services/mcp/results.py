"""An MCP tool result as text the model can read, within a cap.

Text parts are kept; images, audio and binary resources are described (kind, MIME
type, size) rather than passed on; embedded text resources are kept with their URI;
resource links name their URI. A result with no content but structured content is
that JSON. The whole is cut at the server's `max_result_chars`, saying how much was
cut. Framing (the result is outside content) is the tool's job, once, on this text.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the SDK loads on first use: a process without MCP servers never pays for it
    import mcp_types as types


def _size(data: str) -> str:
    try:
        count = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        count = len(data)
    return f"{count / 1024:.1f} KB" if count >= 1024 else f"{count} bytes"


def _resource(resource: Any) -> str:
    import mcp_types as types

    mime = resource.mime_type or "unknown type"
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri} ({mime})]\n{resource.text}"
    blob = getattr(resource, "blob", "")
    return f"[resource {resource.uri}: {mime}, {_size(blob)}, not shown]"


def describe_part(part: Any) -> str:
    """One content part as text (non-text parts described, never passed on)."""
    import mcp_types as types

    if isinstance(part, types.TextContent):
        return part.text
    if isinstance(part, types.ImageContent):
        return f"[image: {part.mime_type}, {_size(part.data)}, not shown]"
    if isinstance(part, types.AudioContent):
        return f"[audio: {part.mime_type}, {_size(part.data)}, not shown]"
    if isinstance(part, types.EmbeddedResource):
        return _resource(part.resource)
    if isinstance(part, types.ResourceLink):
        return f"[link to resource {part.uri} ({part.name})]"
    return f"[{getattr(part, 'type', 'unknown')} content, not shown]"


def result_text(result: types.CallToolResult) -> str:
    """The whole result as one text (parts joined by blank lines)."""
    parts = [describe_part(p) for p in result.content or []]
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return "\n\n".join(parts)


def cap(text: str, limit: int) -> str:
    """`text` within `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… result cut: {len(text) - limit} more characters]"
