"""The fake Gmail v1 driven by the real google-api-python-client (discovery-based)."""

from __future__ import annotations

import asyncio
import base64
from email.message import EmailMessage

import pytest
from google.oauth2.credentials import Credentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from tests.fakes.gmail_fake import GMAIL_COMPOSE_SCOPE, GMAIL_READ_SCOPE
from tests.fakes.google_server import CALENDAR_SCOPE, FakeGoogle

pytestmark = pytest.mark.timeout(15)
ALICE, BOB = "alice@example.com", "bob@example.com"


def _gmail(fake: FakeGoogle, account: str, scopes: tuple[str, ...]):
    tokens = fake.issue_tokens(account, scopes)
    creds = Credentials(tokens["access_token"])
    return build("gmail", "v1", credentials=creds, static_discovery=True,
                 cache_discovery=False, client_options={"api_endpoint": fake.gmail_endpoint})


def _raw(to: str, subject: str, body: str) -> str:
    mail = EmailMessage()
    mail["To"], mail["Subject"] = to, subject
    mail.set_content(body)
    return base64.urlsafe_b64encode(mail.as_bytes()).decode()


async def test_messages_list_get_with_mime_parts_and_query() -> None:
    async with FakeGoogle() as fake:
        fake.add_mail(ALICE, sender="Ann <ann@example.org>", subject="Lunch",
                      text="Lunch on Friday?", html="<p>Lunch on <b>Friday</b>?</p>",
                      attachments=(("menu.pdf", "application/pdf", b"%PDF-1.4 x"),))
        fake.add_mail(ALICE, sender="shop@example.net", subject="Your order", text="Shipped.")
        fake.add_mail(BOB, sender="ann@example.org", subject="Lunch", text="Bob's own mail")
        gmail = _gmail(fake, ALICE, (GMAIL_READ_SCOPE,))

        def run():
            found = gmail.users().messages().list(userId="me", q="from:ann lunch").execute()
            full = gmail.users().messages().get(userId="me", id=found["messages"][0]["id"]).execute()
            meta = gmail.users().messages().get(
                userId="me", id=found["messages"][0]["id"], format="metadata",
                metadataHeaders=["Subject"]).execute()
            every = gmail.users().messages().list(userId="me", maxResults=1).execute()
            return found, full, meta, every

        found, full, meta, every = await asyncio.to_thread(run)
        gmail.close()
    assert found["resultSizeEstimate"] == 1  # Bob's mail is not Alice's
    payload = full["payload"]
    assert payload["mimeType"] == "multipart/mixed"
    kinds = [p["mimeType"] for p in payload["parts"]]
    assert kinds == ["multipart/alternative", "application/pdf"]
    text = payload["parts"][0]["parts"][0]
    assert base64.urlsafe_b64decode(text["body"]["data"]).decode().strip() == "Lunch on Friday?"
    assert payload["parts"][1]["filename"] == "menu.pdf"
    assert "attachmentId" in payload["parts"][1]["body"]
    assert [h["name"] for h in meta["payload"]["headers"]] == ["Subject"]
    assert len(every["messages"]) == 1 and every["nextPageToken"]


async def test_drafts_create_get_update_send_and_history() -> None:
    async with FakeGoogle() as fake:
        gmail = _gmail(fake, ALICE, (GMAIL_READ_SCOPE, GMAIL_COMPOSE_SCOPE))

        def run():
            start = fake.mail.get(ALICE, {}).get("history", [])
            made = gmail.users().drafts().create(
                userId="me", body={"message": {"raw": _raw(BOB, "Hi", "first")}}).execute()
            gmail.users().drafts().update(
                userId="me", id=made["id"],
                body={"message": {"raw": _raw(BOB, "Hi", "second")}}).execute()
            got = gmail.users().drafts().get(userId="me", id=made["id"]).execute()
            sent = gmail.users().drafts().send(userId="me", body={"id": made["id"]}).execute()
            history = gmail.users().history().list(userId="me", startHistoryId="1").execute()
            direct = gmail.users().messages().send(
                userId="me", body={"raw": _raw(BOB, "Direct", "body")}).execute()
            return start, made, got, sent, history, direct

        _, made, got, sent, history, direct = await asyncio.to_thread(run)
        with pytest.raises(HttpError) as gone:
            await asyncio.to_thread(
                gmail.users().drafts().get(userId="me", id=made["id"]).execute)
        with pytest.raises(HttpError) as bad:
            await asyncio.to_thread(
                gmail.users().messages().get(userId="me", id="not an id!").execute)
        gmail.close()
        sent_mail = fake.sent_messages(ALICE)
    assert got["message"]["payload"]["headers"]
    assert sent["labelIds"] == ["SENT"] and direct["labelIds"] == ["SENT"]
    assert [m.get_content().strip() for m in sent_mail] == ["second", "body"]
    assert len(history["history"]) >= 2
    assert gone.value.resp.status == 404 and bad.value.resp.status == 400


async def test_scopes_are_enforced() -> None:
    async with FakeGoogle() as fake:
        calendar_only = _gmail(fake, ALICE, (CALENDAR_SCOPE,))
        read_only = _gmail(fake, ALICE, (GMAIL_READ_SCOPE,))
        with pytest.raises(HttpError) as no_mail:
            await asyncio.to_thread(calendar_only.users().messages().list(userId="me").execute)
        with pytest.raises(HttpError) as no_compose:
            await asyncio.to_thread(
                read_only.users().drafts().create(
                    userId="me", body={"message": {"raw": _raw(BOB, "x", "y")}}).execute)
        calendar_only.close()
        read_only.close()
    assert no_mail.value.resp.status == 403 and no_compose.value.resp.status == 403
