"""HTML responses for the web page: Jinja2 templates (autoescaped), security headers.

Every page goes out with a strict Content-Security-Policy: scripts and styles
only from this server's /static/ files, no inline script or style, no frames,
forms only to this origin. Templates autoescape everything; nothing is marked
safe except the server-built SVG chart, which escapes its own text.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
from aiohttp import web

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=jinja2.select_autoescape(["html"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _local(when: datetime | None, zone: ZoneInfo | str | None = None, fmt: str = "%a %d %b %H:%M"):
    if when is None:
        return "—"
    if zone is not None:
        when = when.astimezone(ZoneInfo(zone) if isinstance(zone, str) else zone)
    return when.strftime(fmt)


def _number(value: int | float | None) -> str:
    return f"{value or 0:,}"


def _bytes(value: int | None) -> str:
    """A file size people read: 32 B, 4.1 kB, 2.3 MB."""
    size = value or 0
    if size < 1000:
        return f"{size} B"
    if size < 1_000_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1_000_000:.1f} MB"


_ENV.filters["local"] = _local
_ENV.filters["number"] = _number
_ENV.filters["bytes"] = _bytes


def render(name: str, *, status: int = 200, **context: Any) -> web.Response:
    """Render a template into an HTML response with the security headers."""
    body = _ENV.get_template(name).render(**context)
    return web.Response(text=body, status=status, content_type="text/html", headers=HEADERS)


def message_page(status: int, title: str, text: str, *, session: Any = None,
                 action: dict | None = None) -> web.Response:
    """A page that only says something (refusals, errors, 404)."""
    return render("message.html", status=status, title=title, text=text, session=session,
                  action=action, nav=None)
