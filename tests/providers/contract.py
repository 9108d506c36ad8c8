"""The provider contract suite: what every `Calendar` and `Tasks` must do.

Each test takes a `driver` (drivers.py) and runs on every provider in
`DRIVERS` — test_contract.py parametrizes it. The cases are the ones the
seam's users rely on: create and list, a listing across a DST change, a
weekly series with one occurrence moved and one cancelled, an all-day event,
a write with a stale version refused (with the event as it is now), delete,
tasks, errors as one sentence, and a server that does not answer.

The mail cases (search, read, draft, send a stored draft only as it was shown —
the send the person approved —, errors, a server that does not answer) take a
`mail_driver` instead: they run on every provider that declares the mail
capability (drivers.MAIL_DRIVERS).
"""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta

import pytest

from panager.errors import ToolError
from panager.services.accounts.provider import (
    Capability,
    Changed,
    EventChange,
    NewEvent,
    NewTask,
    NotFound,
    ProviderError,
    TaskChange,
    Unreachable,
    busy,
)
from tests.providers.drivers import ZONE


def at(day: int, hour: int, month: int = 11) -> datetime:
    """A local time in the suite's zone, 2026."""
    return datetime(2026, month, day, hour, 0, tzinfo=ZONE)


def one_sentence(message: str) -> None:
    """A provider error a person can read: one line, no traceback, no internals."""
    assert message and "\n" not in message and len(message) < 400, message
    assert "Traceback" not in message and "HttpError" not in message, message


async def test_calendars_name_their_account_and_one_default(driver):
    found = await driver.calendar.calendars()
    assert [c.default for c in found].count(True) == 1
    default = next(c for c in found if c.default)
    assert default.name and default.account and default.writable
    assert len({c.id for c in found}) == len(found)
    assert all(c.provider == driver.name for c in found)


async def test_create_then_list_and_create_again(driver):
    cal = driver.calendar
    made = await cal.create("primary", NewEvent("Dentist", at(23, 9), at(23, 10),
                                                location="Main St"), ZONE)
    assert made.created and not made.existing
    event = made.event
    assert event.title == "Dentist" and event.location == "Main St" and event.version
    assert event.start == at(23, 9) and event.end == at(23, 10) and not event.all_day
    listed = (await cal.events(at(22, 0), at(24, 0), ZONE)).events
    assert [(e.id, e.title) for e in listed] == [(event.id, "Dentist")]
    assert listed[0].calendar.default and listed[0].account
    again = await cal.create("primary", NewEvent("Dentist", at(23, 9), at(23, 10),
                                                 location="Main St"), ZONE)
    assert again.existing and not again.created and again.event.id == event.id
    assert len((await cal.events(at(22, 0), at(24, 0), ZONE)).events) == 1


async def test_listing_across_a_dst_change_keeps_wall_clock_times(driver):
    cal = driver.calendar
    await driver.add_weekly("Choir", at(15, 19, month=10), 90, 3)  # 15, 22, 29 October
    before = await cal.create("primary", NewEvent("Before", at(24, 12, 10), at(24, 13, 10)),
                              ZONE)
    after = await cal.create("primary", NewEvent("After", at(25, 12, 10), at(25, 13, 10)), ZONE)
    listed = (await cal.events(at(20, 0, 10), at(31, 0, 10), ZONE)).events
    assert [e.title for e in listed] == ["Choir", "Before", "After", "Choir"]
    choirs = [e for e in listed if e.title == "Choir"]
    assert [e.start.astimezone(ZONE).hour for e in choirs] == [19, 19]
    offsets = [e.start.utcoffset() for e in choirs]
    assert offsets == [timedelta(hours=2), timedelta(hours=1)], offsets
    assert all(e.end - e.start == timedelta(minutes=90) for e in choirs)
    assert {before.event.id, after.event.id} <= {e.id for e in listed}


async def test_weekly_series_with_one_moved_and_one_cancelled_occurrence(driver):
    cal = driver.calendar
    await driver.add_weekly("Standup", at(2, 9), 15, 5)  # Mondays 2 … 30 November
    window = (at(1, 0), at(30, 23))
    first = (await cal.events(*window, ZONE)).events
    assert [e.start.day for e in first] == [2, 9, 16, 23, 30]
    assert all(e.recurring and e.series_id == first[0].series_id for e in first)
    assert len({e.id for e in first}) == 5
    second, fourth = first[1], first[3]
    moved = await cal.update("primary", second.id, EventChange(start=at(10, 14)),
                             second.version, ZONE)
    assert moved.start == at(10, 14) and moved.end == at(10, 14) + timedelta(minutes=15)
    assert await cal.delete("primary", fourth.id, fourth.version) is True
    now = (await cal.events(*window, ZONE)).events
    assert [(e.start.day, e.start.astimezone(ZONE).hour) for e in now] == [
        (2, 9), (10, 14), (16, 9), (30, 9)]
    assert all(e.recurring and e.title == "Standup" for e in now)


async def test_all_day_event_is_dates_with_an_exclusive_end(driver):
    cal = driver.calendar
    made = (await cal.create("primary", NewEvent("Trip", date(2026, 11, 25),
                                                 date(2026, 11, 27)), ZONE)).event
    assert made.all_day and made.start == date(2026, 11, 25) and made.end == date(2026, 11, 27)
    listed = (await cal.events(at(26, 12), at(26, 13), ZONE)).events
    assert [e.id for e in listed] == [made.id] and listed[0].all_day
    assert busy(listed, at(26, 0), at(28, 0), ZONE) == [(at(26, 0), at(27, 0))]


async def test_a_stale_version_is_refused_and_shows_the_event_now(driver):
    cal = driver.calendar
    made = (await cal.create("primary", NewEvent("Lunch", at(24, 12), at(24, 13)), ZONE)).event
    await driver.touch(made, "Lunch with Ann")
    with pytest.raises(Changed) as refused:
        await cal.update("primary", made.id, EventChange(title="Mine"), made.version, ZONE)
    one_sentence(refused.value.message)
    assert refused.value.current is not None
    assert refused.value.current.title == "Lunch with Ann"
    assert refused.value.current.version != made.version
    assert (await cal.event("primary", made.id)).title == "Lunch with Ann"  # nothing written
    with pytest.raises(Changed):
        await cal.delete("primary", made.id, made.version)
    fresh = refused.value.current
    done = await cal.update("primary", made.id, EventChange(title="Mine"), fresh.version, ZONE)
    assert done.title == "Mine" and done.version != fresh.version


async def test_delete_then_delete_again(driver):
    cal = driver.calendar
    made = (await cal.create("primary", NewEvent("Gym", at(25, 7), at(25, 8)), ZONE)).event
    assert await cal.delete("primary", made.id, made.version) is True
    assert (await cal.events(at(25, 0), at(26, 0), ZONE)).events == []
    assert await cal.delete("primary", made.id, "") is False
    with pytest.raises(NotFound):
        await cal.event("primary", made.id)


async def test_tasks_create_list_change_complete_delete(driver):
    tasks = driver.tasks
    if tasks is None:  # a calendar-only provider (CalDAV): it offers no task capability
        assert not {Capability.TASKS_READ, Capability.TASKS_WRITE} & driver.capabilities
        return
    assert [t.default for t in await tasks.lists()].count(True) == 1
    milk = await tasks.create(NewTask("Buy milk", date(2026, 11, 25), "2%"))
    call = await tasks.create(NewTask("Call mum"))
    assert (milk.title, milk.due, milk.notes, milk.done) == ("Buy milk", date(2026, 11, 25),
                                                             "2%", False)
    assert {t.title for t in (await tasks.tasks()).tasks} == {"Buy milk", "Call mum"}
    changed = await tasks.update(milk.id, TaskChange(title="Buy oat milk", clear_due=True))
    assert changed.title == "Buy oat milk" and changed.due is None and changed.notes == "2%"
    assert (await tasks.complete(milk.id)).done
    assert [t.title for t in (await tasks.tasks()).tasks] == ["Call mum"]
    assert {t.title for t in (await tasks.tasks(show_completed=True)).tasks} == {
        "Buy oat milk", "Call mum"}
    assert (await tasks.task(call.id)).title == "Call mum"
    await tasks.delete(call.id)
    with pytest.raises(NotFound) as gone:
        await tasks.task(call.id)
    one_sentence(gone.value.message)
    with pytest.raises(NotFound):
        await tasks.delete("nosuchtask")
    assert [t.title for t in (await tasks.tasks(show_completed=True)).tasks] == ["Buy oat milk"]


async def test_errors_are_one_sentence(driver):
    cal = driver.calendar
    for attempt in (
        cal.event("primary", "nosuchevent0"),
        cal.update("primary", "nosuchevent0", EventChange(title="x"), "", ZONE),
        cal.create("nosuchcalendar@example.com", NewEvent("x", at(24, 9), at(24, 10)), ZONE),
        *([driver.tasks.task("nosuchtask")] if driver.tasks is not None else []),
    ):
        with pytest.raises(ProviderError) as failed:
            await attempt
        one_sentence(failed.value.message)


@pytest.mark.timing
async def test_a_server_that_does_not_answer_is_one_sentence_in_time(driver):
    async with driver.stalled(0.5) as cal:
        started = time.monotonic()
        with pytest.raises(Unreachable) as failed:
            await cal.events(at(22, 0), at(24, 0), ZONE)
        assert time.monotonic() - started < 20  # bounded by the timeout, not the server
        one_sentence(failed.value.message)
        assert "did not answer" in failed.value.message


# -- mail: every provider that declares the mail capability (`mail_driver`) -------------------


async def test_mail_search_then_read(mail_driver):
    box = await mail_driver.mailbox()
    await mail_driver.deliver("Ann <ann@example.org>", "Invoice 42", "Please pay by Friday.")
    await mail_driver.deliver("bob@example.org", "Lunch?", "Noon at the usual place.")
    found = await box.search("invoice")
    assert [(m.subject, "ann@example.org" in m.sender) for m in found] == [("Invoice 42", True)]
    mail = await box.read(found[0].id)
    assert mail.id == found[0].id and mail.subject == "Invoice 42"
    assert "Please pay by Friday." in mail.text and "ann@example.org" in mail.sender


async def test_a_draft_is_sent_only_as_it_was_shown(mail_driver):
    box = await mail_driver.mailbox()
    draft_id = await box.draft("carol@example.org", "Minutes", "Here they are.")
    shown = await box.draft_view(draft_id)
    assert "carol@example.org" in shown.to and shown.subject == "Minutes"
    assert shown.body.strip() == "Here they are." and shown.digest
    await mail_driver.edit_draft(draft_id, "Send me your password.")  # changed elsewhere
    with pytest.raises(ToolError) as refused:
        await box.send_draft(draft_id, shown.digest)
    one_sentence(str(refused.value))
    assert await mail_driver.sent() == []  # nothing went out
    now = await box.draft_view(draft_id)
    assert now.digest != shown.digest and "password" in now.body
    sent_id = await box.send_draft(draft_id, now.digest)  # what the person approved now
    assert sent_id
    sent = await mail_driver.sent()
    assert [(("carol@example.org" in to), subject) for to, subject, _ in sent] == [
        (True, "Minutes")]
    assert "password" in sent[0][2]


async def test_mail_errors_are_one_sentence(mail_driver):
    box = await mail_driver.mailbox()
    for attempt in (box.read("no-such-message"), box.draft_view("no-such-draft"),
                    box.send_draft("no-such-draft", "0" * 64)):
        with pytest.raises(ToolError) as failed:
            await attempt
        one_sentence(str(failed.value))


async def test_a_mail_server_that_does_not_answer_is_one_sentence_in_time(mail_driver):
    box = await mail_driver.mailbox(timeout=0.3)
    async with mail_driver.stalled(0.3):
        began = time.monotonic()
        with pytest.raises(Unreachable) as failed:
            await box.search("anything")
        assert time.monotonic() - began < 20  # bounded by the timeout, not the server
    one_sentence(str(failed.value))
    assert "did not answer" in str(failed.value)
