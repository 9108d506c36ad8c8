"""The Calendar and Tasks tools against FakeGoogle: arguments, results, and the HTTP calls made.

The user lives in Asia/Seoul (UTC+9); the clock is Sat 2026-11-21 12:00 UTC (21:00 there).
"""

from __future__ import annotations

import pytest

from panager.errors import ToolError
from tests.fakes.google_server import FakeGoogle
from tests.google_helpers import ALICE, start_harness

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _plain_http_oauth(monkeypatch):
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")


@pytest.fixture
async def fake():
    async with FakeGoogle() as server:
        yield server


@pytest.fixture
async def linked(fake, make_app):
    """(harness, tools of the linked local user in Seoul)."""
    h = await start_harness(make_app, fake)
    user = await h.app.deps.users.set_timezone((await h.app.local_user()).id, "Asia/Seoul")
    assert (await h.link(user))[0] == 200
    await h.recorder.wait()
    return h, h.tools(user)


def calls_since(fake: FakeGoogle, start: int) -> list[tuple[str, str]]:
    return [(r["method"], r["path"]) for r in fake.requests[start:]]


async def test_tool_names_and_arguments_are_the_public_ones(linked):
    _, tools = linked
    args = {
        name: set(t.args) for name, t in tools.items() if name.split("_")[0] in ("task", "calendar")
    }
    assert args == {
        "task_list": {"show_completed"},
        "task_create": {"title", "due", "notes"},
        "task_update": {"task_id", "title", "notes", "due", "completed"},
        "task_delete": {"task_id"},
        "calendar_list_events": {"start", "end"},
        "calendar_create_event": {
            "title",
            "start",
            "end",
            "description",
            "location",
            "calendar_id",
        },
        "calendar_update_event": {
            "event_id",
            "calendar_id",
            "title",
            "start",
            "end",
            "description",
            "location",
        },
        "calendar_delete_event": {"event_id", "calendar_id"},
    }
    assert tools["calendar_create_event"].args["calendar_id"]["default"] == "primary"


async def test_event_create_list_update_delete(linked, fake):
    _, tools = linked
    start = len(fake.requests)
    made = await tools["calendar_create_event"].ainvoke(
        {
            "title": "Dentist",
            "start": "2026-11-23T09:00",
            "end": "2026-11-23T10:00",
            "location": "Main St",
        }
    )
    event = made["event"]
    assert made["created"] and event["start"] == "2026-11-23T09:00+09:00"
    assert event["end"] == "2026-11-23T10:00+09:00" and event["calendar_id"] == "primary"
    insert = fake.requests[-1]
    assert (insert["method"], insert["path"]) == ("POST", "/calendar/v3/calendars/primary/events")
    assert insert["json"]["id"] == event["id"] and insert["json"]["id"].startswith("pn")
    assert insert["json"]["start"] == {
        "dateTime": "2026-11-23T09:00:00+09:00",
        "timeZone": "Asia/Seoul",
    }

    again = await tools["calendar_create_event"].ainvoke(
        {
            "title": "Dentist",
            "start": "2026-11-23T00:00Z",
            "end": "2026-11-23T01:00Z",
            "location": "Main St",
        }
    )
    assert not again["created"] and again["event"]["id"] == event["id"]
    assert len(fake.calendars[ALICE]["primary"]["events"]) == 1

    listed = await tools["calendar_list_events"].ainvoke({})
    assert [e["title"] for e in listed["events"]] == ["Dentist"]
    assert listed["from"] == "2026-11-21T21:00+09:00" and listed["to"] == "2026-11-28T21:00+09:00"
    events_query = next(r for r in reversed(fake.requests) if r["path"].endswith("/events"))[
        "query"
    ]
    assert events_query["singleEvents"] == "true" and events_query["orderBy"] == "startTime"
    assert events_query["timeMin"] == "2026-11-21T12:00:00+00:00"

    moved = await tools["calendar_update_event"].ainvoke(
        {"event_id": event["id"], "start": "2026-11-24T15:00", "title": "Dentist (moved)"}
    )
    assert moved["event"]["start"] == "2026-11-24T15:00+09:00"
    assert moved["event"]["end"] == "2026-11-24T16:00+09:00"  # the duration is kept
    patch = fake.requests[-1]
    assert patch["method"] == "PATCH" and patch["json"]["summary"] == "Dentist (moved)"

    assert (await tools["calendar_delete_event"].ainvoke({"event_id": event["id"]}))["ok"]
    assert fake.requests[-1]["method"] == "DELETE"
    assert (
        "already"
        in (await tools["calendar_delete_event"].ainvoke({"event_id": event["id"]}))["note"]
    )
    # the same create after a delete brings the (derived-id) event back as asked
    revived = await tools["calendar_create_event"].ainvoke(
        {"title": "Dentist", "start": "2026-11-23T09:00", "end": "2026-11-23T10:00"}
    )
    assert revived["created"] and revived["event"]["id"] == event["id"]
    assert revived["event"]["title"] == "Dentist"
    assert revived["event"]["start"] == "2026-11-23T09:00+09:00"
    assert fake.calendars[ALICE]["primary"]["events"][event["id"]]["status"] == "confirmed"
    await tools["calendar_delete_event"].ainvoke({"event_id": event["id"]})
    with pytest.raises(ToolError, match="calendar_list_events"):
        await tools["calendar_update_event"].ainvoke({"event_id": "nosuchevent", "title": "x"})
    assert ("GET", "/calendar/v3/users/me/calendarList") in calls_since(fake, start)
    assert {r["account"] for r in fake.requests[start:]} == {ALICE}


async def test_all_day_recurring_secondary_calendars_and_pages(linked, fake):
    _, tools = linked
    family = next(k for k in fake.calendars[ALICE] if k != "primary")
    fake.add_event(
        ALICE,
        family,
        summary="Family dinner",
        start="2026-11-22T10:00:00Z",
        end="2026-11-22T12:00:00Z",
    )
    fake.add_event(
        ALICE,
        summary="Standup",
        start={"dateTime": "2026-11-23T09:00:00", "timeZone": "Asia/Seoul"},
        end={"dateTime": "2026-11-23T09:15:00", "timeZone": "Asia/Seoul"},
        recurrence=["RRULE:FREQ=DAILY;COUNT=6"],
    )
    trip = await tools["calendar_create_event"].ainvoke(
        {"title": "Trip", "start": "2026-11-25", "end": "2026-11-26"}
    )
    assert fake.requests[-1]["json"]["end"] == {"date": "2026-11-27"}  # exclusive for Google
    assert trip["event"]["all_day"] and trip["event"]["end"] == "2026-11-26"

    listed = await tools["calendar_list_events"].ainvoke(
        {"start": "2026-11-22", "end": "2026-11-28"}
    )
    titles = [e["title"] for e in listed["events"]]
    assert titles.count("Standup") == 6 and "Trip" in titles
    dinner = next(e for e in listed["events"] if e["title"] == "Family dinner")
    assert dinner["calendar_id"] == family and dinner["calendar"] == "Family"
    assert dinner["start"] == "2026-11-22T19:00+09:00"
    assert all(e["recurring"] for e in listed["events"] if e["title"] == "Standup")
    pages = [r for r in fake.requests if r["path"] == f"/calendar/v3/calendars/{ALICE}/events"]
    assert "pageToken" in pages[-1]["query"]  # 7 events on primary, 5 per page

    with pytest.raises(ToolError, match="ISO 8601"):
        await tools["calendar_create_event"].ainvoke(
            {"title": "x", "start": "tomorrow", "end": "later"}
        )
    with pytest.raises(ToolError, match="after start"):
        await tools["calendar_create_event"].ainvoke(
            {"title": "x", "start": "2026-11-25T10:00", "end": "2026-11-25T09:00"}
        )
    with pytest.raises(ToolError, match="Unknown calendar_id"):
        await tools["calendar_create_event"].ainvoke(
            {
                "title": "x",
                "start": "2026-11-25T10:00",
                "end": "2026-11-25T11:00",
                "calendar_id": "nope@x",
            }
        )


async def test_task_create_list_update_delete(linked, fake):
    _, tools = linked
    made = (
        await tools["task_create"].ainvoke(
            {"title": "Buy milk", "due": "2026-11-25", "notes": "2%"}
        )
    )["task"]
    insert = fake.requests[-1]
    assert (insert["method"], insert["path"]) == ("POST", "/tasks/v1/lists/@default/tasks")
    assert insert["json"] == {"title": "Buy milk", "due": "2026-11-25T00:00:00.000Z", "notes": "2%"}
    assert made == {"id": made["id"], "title": "Buy milk", "due": "2026-11-25", "notes": "2%"}
    # a late-evening local time is still that local day
    late = (await tools["task_create"].ainvoke({"title": "Call mum", "due": "2026-11-26T23:30"}))[
        "task"
    ]
    assert late["due"] == "2026-11-26"

    listed = await tools["task_list"].ainvoke({})
    assert {t["title"] for t in listed["tasks"]} == {"Buy milk", "Call mum"}
    assert fake.requests[-1]["query"]["showCompleted"] == "false"

    done = await tools["task_update"].ainvoke({"task_id": made["id"], "completed": True})
    assert done["task"]["done"] and fake.requests[-1]["method"] == "PATCH"
    assert fake.requests[-1]["json"] == {"status": "completed"}
    assert [t["title"] for t in (await tools["task_list"].ainvoke({}))["tasks"]] == ["Call mum"]
    everything = await tools["task_list"].ainvoke({"show_completed": True})
    assert any(t.get("done") for t in everything["tasks"])
    reopened = await tools["task_update"].ainvoke(
        {"task_id": made["id"], "completed": False, "due": ""}
    )
    assert not reopened["task"].get("done") and "due" not in reopened["task"]

    assert (await tools["task_delete"].ainvoke({"task_id": made["id"]}))["ok"]
    assert fake.requests[-1]["method"] == "DELETE"
    with pytest.raises(ToolError, match="task_list"):
        await tools["task_delete"].ainvoke({"task_id": "nope"})
    with pytest.raises(ToolError, match="Nothing to change"):
        await tools["task_update"].ainvoke({"task_id": late["id"]})
    assert [t["title"] for t in (await tools["task_list"].ainvoke({}))["tasks"]] == ["Call mum"]


async def test_a_listing_asks_every_calendar_at_once(linked, fake):
    _, tools = linked
    family = next(k for k in fake.calendars[ALICE] if k != "primary")
    fake.add_event(ALICE, family, summary="Family dinner",
                   start="2026-11-22T10:00:00Z", end="2026-11-22T12:00:00Z")
    fake.add_event(ALICE, summary="Standup",
                   start="2026-11-23T09:00:00Z", end="2026-11-23T09:15:00Z")
    # Each calendar's listing is held until both are in flight: asked one after the other,
    # the first would wait its 10 s out alone.
    fake.gather_listings = 2
    listed = await tools["calendar_list_events"].ainvoke(
        {"start": "2026-11-22", "end": "2026-11-28"}
    )
    assert sorted(e["title"] for e in listed["events"]) == ["Family dinner", "Standup"]
    assert fake.most_in_flight >= 2
    listings = [r for r in fake.requests if r["path"].endswith("/events")]
    assert len(listings) == 2 and all(r["authorization"] for r in listings)
