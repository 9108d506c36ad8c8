"""Any OAuth provider's link pages: a test-only provider registered after start links at
/connect/<provider>/start and /connect/<provider>/callback through the real web server —
start page, Continue, callback, tokens sealed, the person told in the chat — while a
forged state and an unknown provider get a clear page. (Google's older /oauth/google/
addresses are covered by test_google_link.py.)"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from panager.services.accounts.sealing import Sealer
from tests.fakes.google_server import FakeGoogle
from tests.google_helpers import SECRET, start_harness
from tests.oauth_helpers import ExampleLink, challenge_of, example_provider, token_endpoint

pytestmark = pytest.mark.timeout(60)


async def test_a_registered_oauth_provider_links_at_its_own_address(make_app, monkeypatch):
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")
    async with FakeGoogle() as google, token_endpoint() as (fake, token_url):
        h = await start_harness(make_app, google)
        app = h.app
        link = ExampleLink(app.pool, app.clock, Sealer(SECRET), token_url)
        app.deps.accounts.register(example_provider(link))
        user = await app.deps.users.ensure(4242, "ann")

        url = await link.create_link(user.id, ("mail",))
        path = f"{urlsplit(url).path}?{urlsplit(url).query}"
        status, page, headers = await h.get(path)
        assert status == 200 and "Link Example to @ann" in page, page
        assert "Path=/connect/example" in headers["Set-Cookie"]
        form = dict(re.findall(r'name="(\w+)" value="([^"]*)"', page))
        status, _, headers = await h.post(link.start_path, form)
        assert status == 302 and headers["Location"].startswith("https://login.example/")
        fake.challenges["good-code"] = challenge_of(headers["Location"])

        status, page, _ = await h.get(f"{link.callback_path}?state=x.y&code=good-code")
        assert status == 400 and "/connect example" in page and "Google" not in page
        query = f"state={form['state']}&code=good-code"
        status, page, _ = await h.get(f"/oauth/example/callback?{query}")  # not its address
        assert status == 404 and "Example is not configured" in page
        status, page, _ = await h.get(f"{link.callback_path}?{query}")
        assert status == 200 and "Example account linked" in page, page
        assert "Mail of ann@example for @ann" in page
        sent = await h.recorder.wait()
        assert sent[-1][:2] == (user.id, "✅ Example account ann@example linked: Mail are "
                                          "connected.")
        stored = await link.connections.accounts(user.id, "example")
        assert link.connections.secret(stored[0])["refresh_token"] == "REFRESH-abc"
        status, page, _ = await h.get(f"{link.callback_path}?{query}")
        assert status == 400 and "already used" in page

        status, page, _ = await h.get("/connect/nothing/callback?state=a.b")
        assert status == 404 and "Nothing is not configured" in page
