"""Split long replies into Discord-sized messages without breaking code blocks.

Chat platforms cap a message (Discord 2,000 characters, Telegram 4,096). :func:`split_message`
cuts a reply into chunks of at most ``limit`` characters, preferring paragraph
breaks, then line breaks, then spaces, and cutting inside a word only when a
single token is longer than a whole chunk.

Code fences stay balanced: a chunk that ends inside a `````` block gets a
closing fence appended, and the next chunk reopens the block with the same
language tag. Separators stay with the chunk they end, so removing the added
fence lines and concatenating the chunks gives back the original text (except
for whitespace-only chunks, which are dropped because Discord cannot send them).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

FENCE = "```"
MIN_LIMIT = 50
_FENCE_RE = re.compile(r"```([^\s`]*)")
_MAX_LANG = 20
# Separators in order of preference; a cut is made just after the separator.
_SEPARATORS = ("\n\n", "\n", " ")
# Room kept at the end of every non-final chunk for a closing "\n```".
_CLOSE_RESERVE = len(FENCE) + 1


@dataclass(frozen=True)
class _Fence:
    """A fence token in the text: where it starts and the tag that follows it."""

    start: int
    lang: str


def split_message(text: str, limit: int = 2000) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters.

    Returns ``[]`` for empty or whitespace-only text. Raises ``ValueError`` if
    ``limit`` is below ``MIN_LIMIT`` (there must be room to reopen a fence).
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    if not text.strip():
        return []
    fences = [_Fence(m.start(), m.group(1)) for m in _FENCE_RE.finditer(text)]
    chunks: list[str] = []
    pos = 0
    while pos < len(text):
        opening = _open_fence_at(fences, pos)
        prefix = _reopen_line(opening)
        if len(prefix) + len(text) - pos <= limit:
            _append(chunks, prefix + text[pos:])
            break
        cut = _choose_cut(text, fences, pos, pos + limit - len(prefix) - _CLOSE_RESERVE)
        _append(chunks, prefix + text[pos:cut] + _close_suffix(text, fences, cut))
        pos = cut
    return chunks


def _append(chunks: list[str], chunk: str) -> None:
    """Append ``chunk`` unless it has nothing Discord would display."""
    if chunk.strip():
        chunks.append(chunk)


def _open_fence_at(fences: list[_Fence], pos: int) -> _Fence | None:
    """Return the fence opened before ``pos`` and still open there, if any."""
    count = bisect_left(fences, pos, key=lambda fence: fence.start)
    return fences[count - 1] if count % 2 else None


def _reopen_line(opening: _Fence | None) -> str:
    """The line that reopens ``opening`` at the start of a new chunk."""
    if opening is None:
        return ""
    lang = opening.lang if len(opening.lang) <= _MAX_LANG else ""
    return f"{FENCE}{lang}\n"


def _close_suffix(text: str, fences: list[_Fence], cut: int) -> str:
    """What to append to a chunk ending at ``cut`` so its fences balance."""
    if _open_fence_at(fences, cut) is None:
        return ""
    return FENCE if text[cut - 1] == "\n" else "\n" + FENCE


def _choose_cut(text: str, fences: list[_Fence], start: int, end: int) -> int:
    """Pick the best cut position in ``(start, end]``; ``end`` is a hard maximum."""
    half = start + (end - start) // 2
    for floor in (half, start):
        for sep in _SEPARATORS:
            found = text.rfind(sep, start, end)
            if found != -1 and found + len(sep) > floor:
                cut = _usable_cut(text, fences, start, found + len(sep))
                if cut is not None:
                    return cut
    return _hard_cut(text, fences, start, end)


def _hard_cut(text: str, fences: list[_Fence], start: int, end: int) -> int:
    """Cut at ``end``, or just before a fence token that ``end`` would split."""
    for fence in fences:
        splits_token = fence.start < end < fence.start + len(FENCE) + len(fence.lang)
        if splits_token and text[start : fence.start].strip():
            return fence.start
    return end


def _usable_cut(text: str, fences: list[_Fence], start: int, cut: int) -> int | None:
    """Return ``cut`` (or an earlier equivalent) if it makes a sensible chunk, else None.

    A chunk must show something, and should not end right after a "```lang" line:
    that would send an empty code block that is closed and reopened at once. Such a
    cut moves to before the fence line, or is refused if the chunk starts there.
    """
    if not text[start:cut].strip():
        return None
    opening = _open_fence_at(fences, cut)
    if opening is None or opening.start < start:
        return cut
    line_start = text.rfind("\n", start, opening.start) + 1
    if text[line_start:cut].rstrip().count("\n"):
        return cut
    if line_start > start and text[start:line_start].strip():
        return line_start
    return None
