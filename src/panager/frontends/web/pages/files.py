"""Files: the documents the person sent — list, read the extracted text, download, delete.

An uploaded file is never served as a page of this origin: the original is
always a download (`Content-Disposition: attachment`, `application/octet-stream`,
`X-Content-Type-Options: nosniff`, a CSP that allows nothing), and its text is
shown escaped inside the page template — an uploaded HTML or SVG file cannot run
script here or pass itself off as one of Panager's pages.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from panager.frontends.web.pages import not_found, page, see_other
from panager.frontends.web.render import HEADERS, render
from panager.services.web_sessions import WebSession

DOWNLOAD_HEADERS = {
    **HEADERS,
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "X-Content-Type-Options": "nosniff",
}


class FilesPage:
    """/files and its actions."""

    def __init__(self, app) -> None:
        self.app = app

    @property
    def documents(self):
        """The document service (None when documents are not kept)."""
        media = self.app.deps.media
        return media.documents if media is not None else None

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [
            web.get("/files", gate.page(self.index)),
            web.get("/files/{id}", gate.page(self.show)),
            web.get("/files/{id}/download", gate.page(self.download)),
            web.post("/files/{id}/delete", gate.page(self.delete)),
        ]

    async def index(self, request: web.Request, session: WebSession) -> web.Response:
        """The person's documents, newest first."""
        docs = await self.documents.list(session.user.id) if self.documents else []
        return render("files.html", **page(session, "files", "Files", request, docs=docs))

    async def show(self, request: web.Request, session: WebSession) -> web.Response:
        """One document's extracted text (escaped, never the file itself)."""
        found = await self._get(request, session)
        if found is None:
            return not_found(session, "file")
        doc, text = found
        return render("file.html", **page(session, "files", doc.name, request, doc=doc,
                                          text=text))

    async def download(self, request: web.Request, session: WebSession) -> web.Response:
        """The original file, as a download only."""
        found = None
        if self.documents is not None:
            found = await self.documents.original(session.user.id, request.match_info["id"])
        if found is None:
            return not_found(session, "file")
        name, _mime, data = found
        ascii_name = name.encode("ascii", "replace").decode().replace('"', "_")
        disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"
        return web.Response(body=data, content_type="application/octet-stream",
                            headers={**DOWNLOAD_HEADERS, "Content-Disposition": disposition})

    async def delete(self, request: web.Request, session: WebSession) -> web.Response:
        """Forget one document and its passages."""
        gone = None
        if self.documents is not None:
            gone = await self.documents.forget(session.user.id, request.match_info["id"])
        if gone is None:
            return not_found(session, "file")
        raise see_other("/files", "deleted")

    async def _get(self, request: web.Request, session: WebSession):
        if self.documents is None:
            return None
        return await self.documents.get(session.user.id, request.match_info["id"])
