"""End-to-end checks of the fake Google server with the real Google client libraries.

google-auth-oauthlib runs the OAuth flow (PKCE, offline access), google-auth refreshes
tokens and google-api-python-client calls Calendar v3 and Tasks v1.  Those clients are
synchronous, so the async tests call them through ``asyncio.to_thread`` while the event
loop serves the fake.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import warnings
from collections.abc import Iterator

import pytest
from google.auth.exceptions import RefreshError
from google.oauth2.credentials import Credentials
from google_auth_oauthlib.flow import Flow
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError
from oauthlib.oauth2.rfc6749.errors import InvalidGrantError

from tests.fakes.google_server import (
    CALENDAR_SCOPE,
    TASKS_SCOPE,
    AuthorizationRejected,
    FakeGoogle,
)

pytestmark = pytest.mark.timeout(10)

SCOPES = [CALENDAR_SCOPE, TASKS_SCOPE]
REDIRECT = "http://127.0.0.1:8765/oauth/google/callback"
ALICE, BOB = "alice@example.com", "bob@example.com"


_OPENED: list = []  # clients whose keep-alive connections are closed after each test


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """oauthlib refuses plain http token/redirect URLs without OAUTHLIB_INSECURE_TRANSPORT."""
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")
    monkeypatch.delenv("OAUTHLIB_RELAX_TOKEN_SCOPE", raising=False)
    yield
    while _OPENED:
        _OPENED.pop().close()


def _flow(fake: FakeGoogle, **kwargs) -> Flow:
    flow = Flow.from_client_config(
        fake.client_config(REDIRECT), scopes=SCOPES, redirect_uri=REDIRECT, **kwargs
    )
    _OPENED.append(flow.oauth2session)
    return flow


async def _connect(fake: FakeGoogle, account: str = ALICE) -> Credentials:
    """Run the whole consent flow like the app does and return the credentials."""
    flow = _flow(fake)
    url, _state = flow.authorization_url(access_type="offline", prompt="consent")
    redirect = await fake.authorize(url, account=account)
    await asyncio.to_thread(flow.fetch_token, authorization_response=redirect)
    return flow.credentials


def _calendar(fake: FakeGoogle, creds: Credentials):
    service = build(
        "calendar",
        "v3",
        credentials=creds,
        static_discovery=True,
        cache_discovery=False,
        client_options={"api_endpoint": fake.calendar_endpoint},
    )
    _OPENED.append(service)
    return service


def _tasks(fake: FakeGoogle, creds: Credentials):
    service = build(
        "tasks",
        "v1",
        credentials=creds,
        static_discovery=True,
        cache_discovery=False,
        client_options={"api_endpoint": fake.tasks_endpoint},
    )
    _OPENED.append(service)
    return service


def _run(request):
    """Execute a googleapiclient request off the event loop."""
    return asyncio.to_thread(request.execute)


async def _all_items(collection, **params) -> list[dict]:
    """Walk every page with ``list``/``list_next``."""
    items, request = [], collection.list(**params)
    while request is not None:
        page = await _run(request)
        items += page.get("items", [])
        request = collection.list_next(request, page)
    return items


def _expired_credentials(fake: FakeGoogle, tokens: dict) -> Credentials:
    return Credentials(
        token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        token_uri=fake.token_uri,
        client_id=fake.client_id,
        client_secret=fake.client_secret,
        expiry=dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=1),
    )


@pytest.mark.asyncio
async def test_consent_flow_then_calendar_crud() -> None:
    async with FakeGoogle() as fake:
        creds = await _connect(fake)
        assert creds.refresh_token and creds.token and set(creds.granted_scopes) == set(SCOPES)
        cal = _calendar(fake, creds)
        listed = await _run(cal.calendarList().list())
        primary = [c for c in listed["items"] if c.get("primary")]
        assert [c["id"] for c in primary] == [ALICE] and len(listed["items"]) == 2

        body = {
            "summary": "Dentist",
            "location": "Main St",
            "start": {"dateTime": "2030-05-01T09:00:00", "timeZone": "Asia/Seoul"},
            "end": {"dateTime": "2030-05-01T10:00:00", "timeZone": "Asia/Seoul"},
        }
        made = await _run(cal.events().insert(calendarId="primary", body=body))
        assert made["start"]["dateTime"] == "2030-05-01T09:00:00+09:00"
        assert made["kind"] == "calendar#event" and made["status"] == "confirmed"

        window = {"timeMin": "2030-05-01T00:00:00Z", "timeMax": "2030-05-02T00:00:00Z"}
        listed = await _run(cal.events().list(calendarId=ALICE, singleEvents=True, **window))
        assert [e["id"] for e in listed["items"]] == [made["id"]]

        patched = await _run(
            cal.events().patch(calendarId="primary", eventId=made["id"], body={"summary": "X"})
        )
        assert patched["summary"] == "X" and patched["location"] == "Main St"
        assert patched["etag"] != made["etag"]

        await _run(cal.events().delete(calendarId="primary", eventId=made["id"]))
        gone = await _run(cal.events().get(calendarId="primary", eventId=made["id"]))
        assert gone["status"] == "cancelled"
        listed = await _run(cal.events().list(calendarId="primary", **window))
        assert listed["items"] == []
        with pytest.raises(HttpError) as again:
            await _run(cal.events().delete(calendarId="primary", eventId=made["id"]))
        assert again.value.resp.status == 410
        with pytest.raises(HttpError) as unknown:
            await _run(cal.events().get(calendarId="primary", eventId="nosuchevent"))
        assert unknown.value.resp.status == 404

        fake.expire_access_tokens()  # Flow credentials refresh too (and send their scopes)
        await _run(cal.calendarList().list())
        assert fake.token_requests[-1]["scope"] == " ".join(SCOPES)


@pytest.mark.asyncio
async def test_client_chosen_event_id_is_idempotent() -> None:
    async with FakeGoogle() as fake:
        cal = _calendar(fake, await _connect(fake))
        body = {
            "id": "panager0123abc",
            "summary": "Once",
            "start": {"date": "2030-01-02"},
            "end": {"date": "2030-01-03"},
        }
        await _run(cal.events().insert(calendarId="primary", body=body))
        with pytest.raises(HttpError) as dup:
            await _run(cal.events().insert(calendarId="primary", body=body))
        assert dup.value.resp.status == 409 and "already exists" in str(dup.value)
        with pytest.raises(HttpError) as bad:
            await _run(cal.events().insert(calendarId="primary", body={**body, "id": "Bad_Id"}))
        assert bad.value.resp.status == 400


@pytest.mark.asyncio
async def test_recurring_event_expands_with_single_events() -> None:
    async with FakeGoogle() as fake:
        cal = _calendar(fake, await _connect(fake))
        body = {
            "summary": "Standup",
            "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=10"],
            "start": {"dateTime": "2030-03-04T09:00:00", "timeZone": "Europe/Berlin"},
            "end": {"dateTime": "2030-03-04T09:15:00", "timeZone": "Europe/Berlin"},
        }
        master = await _run(cal.events().insert(calendarId="primary", body=body))
        window = {"timeMin": "2030-03-01T00:00:00Z", "timeMax": "2030-04-08T00:00:00Z"}
        query = {"calendarId": "primary", "singleEvents": True, "orderBy": "startTime"}
        items = await _all_items(cal.events(), **query, **window)
        assert [e["id"] for e in items][:2] == [
            f"{master['id']}_20300304T080000Z",
            f"{master['id']}_20300311T080000Z",
        ]
        # DST starts on 2030-03-31 in Berlin: still 09:00 local, now 07:00 UTC.
        assert items[-1]["id"] == f"{master['id']}_20300401T070000Z"
        assert items[-1]["start"]["dateTime"] == "2030-04-01T09:00:00+02:00"
        assert all(e["recurringEventId"] == master["id"] for e in items) and len(items) == 5

        second = items[1]["id"]
        await _run(cal.events().delete(calendarId="primary", eventId=second))
        moved = await _run(
            cal.events().patch(calendarId="primary", eventId=items[2]["id"], body={"summary": "!"})
        )
        after = await _all_items(cal.events(), **query, **window)
        assert second not in [e["id"] for e in after] and len(after) == 4
        assert moved["summary"] in [e["summary"] for e in after]

        series = await _run(cal.events().list(calendarId="primary", **window))
        assert master["id"] in [e["id"] for e in series["items"]]


@pytest.mark.asyncio
async def test_pagination_walks_every_page() -> None:
    async with FakeGoogle() as fake:
        for day in range(1, 13):
            fake.add_event(
                ALICE,
                summary=f"E{day}",
                start=f"2030-06-{day:02d}T10:00:00Z",
                end=f"2030-06-{day:02d}T11:00:00Z",
            )
        cal = _calendar(fake, await _connect(fake))
        items = await _all_items(
            cal.events(),
            calendarId="primary",
            singleEvents=True,
            orderBy="startTime",
            timeMin="2030-06-01T00:00:00Z",
        )
        assert [e["summary"] for e in items] == [f"E{d}" for d in range(1, 13)]
        pages = [r for r in fake.requests if r["path"].endswith("/events")]
        assert len(pages) == 3 and "pageToken" in pages[-1]["query"]


@pytest.mark.asyncio
async def test_tasks_crud_and_completion() -> None:
    async with FakeGoogle() as fake:
        tasks = _tasks(fake, await _connect(fake))
        lists = await _run(tasks.tasklists().list())
        assert [t["title"] for t in lists["items"]] == ["My Tasks"]
        list_id = lists["items"][0]["id"]

        body = {"title": "Buy milk", "notes": "2%", "due": "2030-01-05T15:30:00.000Z"}
        made = await _run(tasks.tasks().insert(tasklist="@default", body=body))
        assert made["due"] == "2030-01-05T00:00:00.000Z" and made["status"] == "needsAction"
        listed = await _run(tasks.tasks().list(tasklist=list_id))
        assert [t["id"] for t in listed["items"]] == [made["id"]]

        done = await _run(
            tasks.tasks().patch(tasklist="@default", task=made["id"], body={"status": "completed"})
        )
        assert done["status"] == "completed" and done["completed"].endswith("Z")
        hidden = await _run(tasks.tasks().list(tasklist="@default", showCompleted=False))
        assert "items" not in hidden  # Google omits an empty items list
        again = await _run(
            tasks.tasks().patch(
                tasklist="@default", task=made["id"], body={"status": "needsAction"}
            )
        )
        assert "completed" not in again

        await _run(tasks.tasks().delete(tasklist="@default", task=made["id"]))
        assert "items" not in await _run(tasks.tasks().list(tasklist="@default"))


@pytest.mark.asyncio
async def test_expired_access_token_is_refreshed_transparently() -> None:
    async with FakeGoogle() as fake:
        creds = _expired_credentials(fake, fake.issue_tokens(ALICE))
        old = creds.token
        cal = _calendar(fake, creds)
        await _run(cal.calendarList().list())
        assert creds.token != old and creds.valid
        assert [r["grant_type"] for r in fake.token_requests] == ["refresh_token"]

        fake.expire_access_tokens()  # not yet expired locally: the 401 triggers the refresh
        await _run(cal.calendarList().list())
        assert len(fake.token_requests) == 2
        assert [r["status"] for r in fake.requests] == [200, 401, 200]


@pytest.mark.asyncio
async def test_revoked_grant_raises_refresh_error() -> None:
    async with FakeGoogle() as fake:
        creds = _expired_credentials(fake, fake.issue_tokens(ALICE))
        fake.revoke_account(ALICE)
        with pytest.raises(RefreshError, match="invalid_grant"):
            await _run(_calendar(fake, creds).calendarList().list())


@pytest.mark.asyncio
async def test_unknown_token_is_401() -> None:
    async with FakeGoogle() as fake:
        # google-auth-httplib2 answers a 401 by refreshing: without refresh fields that
        # surfaces as RefreshError, not HttpError.
        with pytest.raises(RefreshError, match="necessary fields"):
            await _run(_tasks(fake, Credentials(token="ya29.forged")).tasklists().list())
        assert fake.requests[-1]["status"] == 401 and fake.requests[-1]["account"] is None


@pytest.mark.asyncio
async def test_unregistered_redirect_uri_is_rejected() -> None:
    async with FakeGoogle(redirect_uris=["https://panager.example/oauth/google/callback"]) as fake:
        url, _ = _flow(fake).authorization_url(access_type="offline", prompt="consent")
        with pytest.raises(AuthorizationRejected, match="redirect_uri_mismatch"):
            await fake.authorize(url)


@pytest.mark.asyncio
async def test_wrong_pkce_verifier_and_reused_code_are_refused() -> None:
    async with FakeGoogle() as fake:
        flow = _flow(fake)
        url, state = flow.authorization_url(access_type="offline", prompt="consent")
        redirect = await fake.authorize(url)
        other = _flow(fake, state=state, code_verifier="x" * 64)
        with pytest.raises(InvalidGrantError, match="code verifier"):
            await asyncio.to_thread(other.fetch_token, authorization_response=redirect)
        await asyncio.to_thread(flow.fetch_token, authorization_response=redirect)
        with pytest.raises(InvalidGrantError):
            await asyncio.to_thread(flow.fetch_token, authorization_response=redirect)


@pytest.mark.asyncio
async def test_authorization_url_is_checked() -> None:
    async with FakeGoogle() as fake:
        no_pkce = _flow(fake, autogenerate_code_verifier=False)
        url, _ = no_pkce.authorization_url(access_type="offline")
        with pytest.raises(AuthorizationRejected, match="PKCE"):
            await fake.authorize(url)
        online, _ = _flow(fake).authorization_url(access_type="online")
        with pytest.raises(AuthorizationRejected, match="offline"):
            await fake.authorize(online)
        good, _ = _flow(fake).authorization_url(access_type="offline")
        denied = await fake.authorize(good, deny=True)
        assert "error=access_denied" in denied and denied.startswith(REDIRECT)


@pytest.mark.asyncio
async def test_refresh_token_only_on_first_consent_or_prompt_consent() -> None:
    async with FakeGoogle() as fake:
        assert (await _connect(fake)).refresh_token
        flow = _flow(fake)
        url, _ = flow.authorization_url(access_type="offline")  # no prompt=consent
        await asyncio.to_thread(flow.fetch_token, authorization_response=await fake.authorize(url))
        assert flow.credentials.refresh_token is None


@pytest.mark.asyncio
async def test_narrower_grant_needs_relaxed_scope_and_is_403(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeGoogle() as fake:
        flow = _flow(fake)
        url, _ = flow.authorization_url(access_type="offline", prompt="consent")
        redirect = await fake.authorize(url, granted_scopes=[CALENDAR_SCOPE])
        with pytest.raises(Warning, match="Scope has changed"):
            await asyncio.to_thread(flow.fetch_token, authorization_response=redirect)

        monkeypatch.setenv("OAUTHLIB_RELAX_TOKEN_SCOPE", "1")
        flow = _flow(fake)
        url, _ = flow.authorization_url(access_type="offline", prompt="consent")
        redirect = await fake.authorize(url, granted_scopes=[CALENDAR_SCOPE])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await asyncio.to_thread(flow.fetch_token, authorization_response=redirect)
        creds = flow.credentials
        assert creds.granted_scopes == [CALENDAR_SCOPE]
        with pytest.raises(HttpError) as err:
            await _run(_tasks(fake, creds).tasklists().list())
        assert err.value.resp.status == 403


@pytest.mark.asyncio
async def test_accounts_are_isolated() -> None:
    async with FakeGoogle() as fake:
        fake.add_event(BOB, summary="Bob only", start="2030-01-01", end="2030-01-02")
        fake.add_task(BOB, title="Bob's task")
        bob_secondary = next(k for k in fake.calendars[BOB] if k != "primary")
        creds = await _connect(fake, ALICE)
        cal, tasks = _calendar(fake, creds), _tasks(fake, creds)
        for calendar_id in (BOB, bob_secondary):
            with pytest.raises(HttpError) as err:
                await _run(cal.events().list(calendarId=calendar_id))
            assert err.value.resp.status == 404
        assert (await _run(cal.events().list(calendarId="primary")))["items"] == []
        bob_list = fake.task_lists[BOB]["@default"]["id"]
        with pytest.raises(HttpError):
            await _run(tasks.tasks().list(tasklist=bob_list))
        assert "items" not in await _run(tasks.tasks().list(tasklist="@default"))
        assert {r["account"] for r in fake.requests} == {ALICE}


def test_background_thread_mode_serves_sync_clients() -> None:
    with FakeGoogle() as fake:
        flow = _flow(fake)
        url, _ = flow.authorization_url(access_type="offline", prompt="consent")
        flow.fetch_token(authorization_response=fake.authorize_sync(url, account=BOB))
        tasks = _tasks(fake, flow.credentials)
        tasks.tasks().insert(tasklist="@default", body={"title": "sync"}).execute()
        assert [t["title"] for t in fake.tasks[BOB]["@default"].values()] == ["sync"]
