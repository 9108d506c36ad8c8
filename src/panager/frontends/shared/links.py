"""Links of an answer (the Google or web sign-in link): a button when the platform takes it."""

from __future__ import annotations

from collections.abc import Callable


def with_link_text(text: str, link: dict | None, button_ok: Callable[[str], bool]) -> str:
    """Append the link as text when it cannot be a button and is not already in the text."""
    if not link or button_ok(link.get("url", "")) or link.get("url", "") in text:
        return text
    return f"{text}\n{link.get('label') or 'Link'}: {link['url']}"


def link_label(link: dict, limit: int) -> str:
    """The button's caption, cut to the platform's limit."""
    return (link.get("label") or "Open link")[:limit]
