"""Holes a co-user or a web page could use, closed on the web side (real PostgreSQL, real
aiohttp): admin rights from the configuration, schedule limits on edit and resume."""

from __future__ import annotations

import pytest

from panager.agent.commands import CommandContext, dispatch
from tests.web_helpers import ADMIN, ALICE, web_harness

pytestmark = pytest.mark.timeout(90)


# -- admin rights come from PANAGER_ADMIN_IDS at every request ---------------------------------


async def test_a_demoted_admin_loses_the_admin_pages_and_invite_at_once(make_app):
    """root's stored role is still 'admin', but the id is no longer in PANAGER_ADMIN_IDS and
    root never wrote in Discord since: no admin page, no /invite, no admin link."""
    h = await web_harness(make_app, admin_ids=[])
    root = await h.client(ADMIN)
    try:
        for path in ("/admin/users", "/admin/invites", "/admin/usage"):
            status, body = await root.get(path)
            assert status == 403 and "For admins only" in body, path
        status, _ = await root.post("/admin/invites", {"uses": "1000", "expires": "never"})
        assert status == 403
        assert 'href="/admin/users"' not in (await root.get("/"))[1]
        stored = await h.app.deps.users.get(ADMIN)
        assert stored.role == "admin"  # what the old check trusted
        for front_end in ("web", "discord", "terminal"):
            ctx = CommandContext(user=stored, assistant=h.app.assistant, front_end=front_end)
            reply = await dispatch(ctx, "/invite 1000 never")
            assert not reply.ok and "admins only" in reply.text
            assert "/invite" not in (await dispatch(ctx, "/help")).text
        assert await h.app.deps.access.invites() == []
    finally:
        await root.close()
        await h.server.stop()


async def test_an_id_added_to_admin_ids_is_admin_on_the_web_before_writing_anywhere(make_app):
    h = await web_harness(make_app, admin_ids=[ALICE])
    alice = await h.client(ALICE)
    try:
        status, body = await alice.get("/admin/users")
        assert status == 200 and 'href="/admin/users"' in body
        user = await h.app.deps.users.get(ALICE)
        ctx = CommandContext(user=user, assistant=h.app.assistant, front_end="web")
        assert (await dispatch(ctx, "/invite")).ok
        local = await h.app.local_user()  # the terminal's own user is an admin too
        ctx = CommandContext(user=local, assistant=h.app.assistant)
        assert (await dispatch(ctx, "/invite")).ok
    finally:
        await alice.close()
        await h.server.stop()
