"""CalDAV beside Google in one process: the urllib3 that requests and google-auth use is the
real one, and a Google token refresh and a CalDAV call both work.

The `caldav` client library (3.6) hard-requires niquests, whose urllib3-future installs a
`.pth` hook that copies itself over the `urllib3` package at every interpreter start (with
pip 23.2 and pip 26 alike: `import urllib3` then reports 2.25.x while pip lists urllib3
2.8). Panager's CalDAV speaks through its own guarded httpx client instead
(docs/calendars.md); this test fails if that hazard comes back in with any dependency.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.metadata

import pytest

pytestmark = pytest.mark.timeout(30)


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


async def test_google_refresh_and_caldav_call_in_one_process(caldav_servers) -> None:
    import google.auth.transport.requests
    import requests
    import urllib3
    from google.oauth2.credentials import Credentials

    from panager.providers.caldav.dav import CalDav
    from panager.providers.caldav.door import Door, Login
    from panager.services.web.guard import AddressGuard, AllowList
    from tests.fakes.google_server import FakeGoogle

    # the urllib3 module imported is the urllib3 distribution installed, not a fork under its name
    assert _installed("urllib3-future") is None and _installed("niquests") is None
    assert urllib3.__version__ == _installed("urllib3")
    assert urllib3.__file__ and "urllib3_future" not in urllib3.__file__
    assert requests.adapters.PoolManager.__module__.startswith("urllib3.")  # that urllib3

    async with FakeGoogle() as fake:
        tokens = fake.issue_tokens("alice@example.com")
        creds = Credentials(
            token=tokens["access_token"],
            refresh_token=tokens["refresh_token"],
            token_uri=fake.token_uri,
            client_id=fake.client_id,
            client_secret=fake.client_secret,
            expiry=dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=1),
        )
        session = requests.Session()
        try:
            await asyncio.to_thread(creds.refresh, google.auth.transport.requests.Request(session))
        finally:
            session.close()
        assert creds.valid and creds.token != tokens["access_token"]
        assert [r["grant_type"] for r in fake.token_requests] == ["refresh_token"]

    server = caldav_servers["radicale"]
    server.make_calendar("alice", "deps", "Deps")
    guard = AddressGuard(allow=AllowList.parse(["127.0.0.1"]))
    async with Door(server.url + "/", Login("alice", server.users["alice"]), guard) as door:
        names = [c.name for c in await CalDav(door).calendars()]
    assert "Deps" in names
