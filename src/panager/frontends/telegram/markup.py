"""Answers as Telegram HTML: the model's Markdown kept where Telegram shows it, escaped elsewhere.

Telegram rejects a message whose markup it cannot parse, so nothing the model
writes reaches it raw: every piece of text is HTML-escaped, and only tags this
module writes itself, always in pairs, are added — fenced code blocks
(`<pre><code class="language-x">`), inline code, `**bold**` and
`[text](https://…)` links. A chunk from `split_message` has balanced fences,
so each chunk converts on its own. Should Telegram still refuse, the sender
falls back to the plain text (frontends/telegram/surface.py).
"""

from __future__ import annotations

import html
import re

_FENCE_BLOCK = re.compile(r"```([^\s`]*)\n?(.*?)```", re.DOTALL)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n<>]+)\]\((https?://[^\s)\"<>]+)\)")
_BOLD = re.compile(r"\*\*([^*<>\n][^*<>]*?)\*\*")
_LANG = re.compile(r"^[A-Za-z0-9_+-]{1,20}$")


def to_html(text: str) -> str:
    """`text` (Markdown as the model writes it) as Telegram HTML that always parses."""
    out: list[str] = []
    pos = 0
    for match in _FENCE_BLOCK.finditer(text):
        out.append(_inline(text[pos : match.start()]))
        lang, code = match.group(1), match.group(2)
        attr = f' class="language-{lang}"' if _LANG.match(lang) else ""
        out.append(f"<pre><code{attr}>{html.escape(code, quote=False)}</code></pre>")
        pos = match.end()
    out.append(_inline(text[pos:]))
    return "".join(out)


def _inline(text: str) -> str:
    parts: list[str] = []
    pos = 0
    for match in _INLINE_CODE.finditer(text):
        parts.append(_plain(text[pos : match.start()]))
        parts.append(f"<code>{html.escape(match.group(1), quote=False)}</code>")
        pos = match.end()
    parts.append(_plain(text[pos:]))
    return "".join(parts)


def _plain(text: str) -> str:
    escaped = html.escape(text, quote=False)
    escaped = _LINK.sub(lambda m: f'<a href="{m.group(2)}">{m.group(1)}</a>', escaped)
    return _BOLD.sub(r"<b>\1</b>", escaped)
