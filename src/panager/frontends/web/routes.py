"""The web page's routes: sign-in, the user's pages, the admin pages and static files."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from panager.frontends.web.auth import Gate
from panager.frontends.web.pages.admin import AdminPages
from panager.frontends.web.pages.chat import ChatPage
from panager.frontends.web.pages.connections import ConnectionsPage
from panager.frontends.web.pages.files import FilesPage
from panager.frontends.web.pages.home import HomePage
from panager.frontends.web.pages.memories import MemoriesPage
from panager.frontends.web.pages.schedules import SchedulesPage
from panager.frontends.web.pages.usage import UsagePage
from panager.frontends.web.pages.webhooks import WebhooksPage
from panager.frontends.web.render import STATIC_DIR

if TYPE_CHECKING:
    from panager.app import App


class Page(Protocol):
    """A group of pages: its routes, each guarded by the session gate."""

    def routes(self, gate: Gate) -> list[web.RouteDef]:
        """The routes of this group."""
        ...


def add_pages(web_app: web.Application, app: App, spawn: Callable) -> Gate:
    """Register every page of the web UI on `web_app`; returns the session gate."""
    gate = Gate(app)
    pages: list[Page] = [
        HomePage(app), SchedulesPage(app), WebhooksPage(app), MemoriesPage(app), FilesPage(app),
        ChatPage(app, spawn),
        UsagePage(app), ConnectionsPage(app), AdminPages(app),
    ]
    routes = gate.routes()
    for page in pages:
        routes.extend(page.routes(gate))
    web_app.add_routes(routes)
    web_app.router.add_static("/static", STATIC_DIR, append_version=False)
    return gate
