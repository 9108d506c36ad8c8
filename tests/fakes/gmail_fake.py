"""Gmail v1 for the fake Google (mixed into `FakeGoogle`), driven by the real client.

Served under ``/gmail/v1/users/{userId}/…`` (the client's ``api_endpoint`` is the
fake's base URL: Gmail's method paths already start with ``gmail/v1/``):

* ``messages``: list (``q``, ``maxResults``, ``pageToken``, ``includeSpamTrash``),
  get (``format`` full | metadata | minimal | raw, ``metadataHeaders``), send (``raw``).
* ``drafts``: create, get, list, update (PUT), send, delete.
* ``history``: list (``startHistoryId``; ``messagesAdded`` records).

Messages are kept as RFC 822 bytes and parsed into Gmail's MIME ``payload`` tree
(``partId``, ``mimeType``, ``filename``, ``headers``, ``body.data`` base64url;
attachments get ``body.attachmentId`` instead of data). Behaviour kept from
Gmail: ``userId`` is ``me`` or the account's address; an id that is not Gmail's
shape answers 400 "Invalid id value", an unknown one 404; sending a draft deletes
the draft and labels its message SENT; ``gmail.compose`` reads drafts but not
messages, ``gmail.readonly`` cannot write.

Query support (``q``): ``from:``, ``to:``, ``subject:``, ``is:unread``, ``in:inbox``,
``in:sent``, ``label:``, quoted phrases and plain words (matched in sender,
subject and text, case-insensitive); other operators (``newer_than:`` …) are
accepted and ignored.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re
import shlex
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime
from typing import Any

from aiohttp import web

_AUTH = "https://www.googleapis.com/auth/"
GMAIL_READ_SCOPE = _AUTH + "gmail.readonly"
GMAIL_COMPOSE_SCOPE = _AUTH + "gmail.compose"
GMAIL_SCOPES = {GMAIL_READ_SCOPE, GMAIL_COMPOSE_SCOPE, _AUTH + "gmail.modify",
                _AUTH + "gmail.send", "https://mail.google.com/"}
_FULL = {"https://mail.google.com/", _AUTH + "gmail.modify"}
_MESSAGE_ID = re.compile(r"^[0-9a-f]{6,32}$")
_DRAFT_ID = re.compile(r"^r-?[0-9]{1,24}$")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


def gmail_needed_scopes(path: str, method: str) -> set[str]:
    """Any one of these scopes authorizes a Gmail call."""
    if "/drafts" in path:
        return {GMAIL_COMPOSE_SCOPE, *_FULL}
    if path.endswith("/messages/send"):
        return {GMAIL_COMPOSE_SCOPE, _AUTH + "gmail.send", *_FULL}
    return {GMAIL_READ_SCOPE, *_FULL} if method == "GET" else set(_FULL)


def _payload(part: Any, part_id: str, headers_only: set[str] | None = None) -> dict:
    headers = [{"name": k, "value": str(v)} for k, v in part.items()]
    if headers_only is not None:
        return {
            "mimeType": part.get_content_type(),
            "headers": [h for h in headers if h["name"].lower() in headers_only],
        }
    node: dict[str, Any] = {
        "partId": part_id,
        "mimeType": part.get_content_type(),
        "filename": part.get_filename() or "",
        "headers": headers,
    }
    if part.is_multipart():
        node["body"] = {"size": 0}
        node["parts"] = [
            _payload(child, f"{part_id}.{i}" if part_id else str(i))
            for i, child in enumerate(part.iter_parts())
        ]
        return node
    data = part.get_payload(decode=True) or b""
    if node["filename"]:
        node["body"] = {"attachmentId": "ANGjdJ" + _b64(part_id.encode()), "size": len(data)}
    else:
        node["body"] = {"size": len(data), "data": _b64(data)}
    return node


def _plain_text(mail: Any) -> str:
    found = []
    for part in mail.walk():
        if part.get_content_type() in ("text/plain", "text/html") and not part.get_filename():
            found.append(part.get_content())
    return re.sub(r"<[^>]+>", " ", " ".join(found))


class _GmailMixin:
    """Gmail v1 endpoints and state (``self.mail[account]``)."""

    def _mailbox(self, account: str) -> dict:
        box = self.mail.get(account)
        if box is None:
            box = self.mail[account] = {"messages": {}, "drafts": {}, "history": []}
        return box

    def _gmail_account(self, request: web.Request) -> dict:
        from tests.fakes.google_server import _ACCOUNT, GoogleApiError

        account = request[_ACCOUNT]
        if self.gmail_failures:
            status, reason, message = self.gmail_failures.pop(0)
            raise GoogleApiError(status, reason, message)
        if request.match_info["userId"] not in ("me", account):
            raise GoogleApiError(403, "forbidden", "Delegation denied for " + account)
        return self._mailbox(account)

    def _new_ids(self) -> tuple[str, int]:
        number = next(self._gmail_ids)
        return f"{number:016x}", number

    # -- state helpers for tests --------------------------------------------------------

    def add_mail(
        self,
        account: str,
        *,
        sender: str,
        subject: str,
        text: str | None = None,
        html: str | None = None,
        attachments: tuple[tuple[str, str, bytes], ...] = (),
        labels: tuple[str, ...] = ("INBOX", "UNREAD"),
        thread_id: str | None = None,
    ) -> str:
        """Deliver a message to ``account`` (text and/or HTML, attachments as
        (filename, mime type, bytes)); returns its id."""
        mail = EmailMessage()
        mail["From"], mail["To"], mail["Subject"] = sender, account, subject
        mail["Date"] = format_datetime(datetime.now(UTC))
        mail["Message-ID"] = f"<{next(self._gmail_ids)}@mail.example>"
        if text is not None:
            mail.set_content(text)
        if html is not None:
            if text is None:
                mail.set_content(html, subtype="html")
            else:
                mail.add_alternative(html, subtype="html")
        for filename, mime, data in attachments:
            main, sub = mime.split("/", 1)
            mail.add_attachment(data, maintype=main, subtype=sub, filename=filename)
        with self._lock:
            self.ensure_account(account)
            return self._store(account, mail.as_bytes(), list(labels), thread_id)["id"]

    def edit_draft(self, account: str, draft_id: str, **headers_and_body: str) -> None:
        """Change a draft as the person would in Gmail (``body=`` and/or headers)."""
        with self._lock:
            box = self._mailbox(account)
            message = box["messages"][box["drafts"][draft_id]]
            mail = BytesParser(policy=policy.default).parsebytes(message["raw"])
            body = headers_and_body.pop("body", None)
            for name, value in headers_and_body.items():
                del mail[name.capitalize()]
                mail[name.capitalize()] = value
            if body is not None:
                mail.set_content(body)
            message["raw"] = mail.as_bytes()

    def sent_messages(self, account: str) -> list[Any]:
        """The parsed messages ``account`` sent, oldest first."""
        box = self._mailbox(account)
        return [
            BytesParser(policy=policy.default).parsebytes(m["raw"])
            for m in box["messages"].values()
            if "SENT" in m["labelIds"]
        ]

    # -- storage ------------------------------------------------------------------------

    def _store(self, account: str, raw: bytes, labels: list[str], thread_id: str | None) -> dict:
        box = self._mailbox(account)
        ident, number = self._new_ids()
        message = {
            "id": ident,
            "threadId": thread_id or ident,
            "labelIds": labels,
            "raw": raw,
            "internalDate": str(number),
            "historyId": str(number),
        }
        box["messages"][ident] = message
        box["history"].append({"id": str(number), "messagesAdded": [{"message": {
            "id": ident, "threadId": message["threadId"], "labelIds": list(labels)}}]})
        return message

    def _render(self, message: dict, fmt: str, headers: list[str] | None = None) -> dict:
        mail = BytesParser(policy=policy.default).parsebytes(message["raw"])
        out = {
            "id": message["id"],
            "threadId": message["threadId"],
            "labelIds": list(message["labelIds"]),
            "snippet": " ".join(_plain_text(mail).split())[:100],
            "historyId": message["historyId"],
            "internalDate": message["internalDate"],
            "sizeEstimate": len(message["raw"]),
        }
        if fmt == "raw":
            out["raw"] = _b64(message["raw"])
        elif fmt == "metadata":
            wanted = {h.lower() for h in headers} if headers else {k.lower() for k in mail}
            out["payload"] = _payload(mail, "", wanted)
        elif fmt != "minimal":
            out["payload"] = _payload(mail, "")
        return out

    def _message_of(self, box: dict, ident: str) -> dict:
        from tests.fakes.google_server import GoogleApiError

        if not _MESSAGE_ID.match(ident):
            raise GoogleApiError(400, "invalidArgument", "Invalid id value")
        message = box["messages"].get(ident)
        if message is None:
            raise GoogleApiError(404, "notFound", "Requested entity was not found.")
        return message

    def _draft_of(self, box: dict, ident: str) -> dict:
        from tests.fakes.google_server import GoogleApiError

        if not _DRAFT_ID.match(ident):
            raise GoogleApiError(400, "invalidArgument", "Invalid id value")
        if ident not in box["drafts"]:
            raise GoogleApiError(404, "notFound", "Requested entity was not found.")
        return box["messages"][box["drafts"][ident]]

    @staticmethod
    def _raw_of(request: web.Request, body: dict | None) -> bytes:
        from tests.fakes.google_server import _bad

        raw = (body or {}).get("raw")
        if not raw:
            raise _bad("'raw' RFC822 payload message string or uploading message via /upload/* "
                       "URL required", "invalidArgument")
        try:
            return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        except (binascii.Error, ValueError) as exc:
            raise _bad("Invalid raw value", "invalidArgument") from exc

    # -- messages ------------------------------------------------------------------------

    async def _gmail_messages_list(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _json

        box = self._gmail_account(request)
        q = request.query
        spam = q.get("includeSpamTrash") == "true"
        matches = [
            m for m in sorted(box["messages"].values(), key=lambda m: -int(m["internalDate"]))
            if (spam or not {"SPAM", "TRASH"} & set(m["labelIds"])) and _matches(m, q.get("q"))
        ]
        size = min(int(q.get("maxResults", 100)), 500)
        start = int(q.get("pageToken", "0") or 0)
        page = matches[start : start + size]
        out: dict[str, Any] = {"resultSizeEstimate": len(matches)}
        if page:
            out["messages"] = [{"id": m["id"], "threadId": m["threadId"]} for m in page]
        if start + size < len(matches):
            out["nextPageToken"] = str(start + size)
        return _json(out)

    async def _gmail_messages_get(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _json

        box = self._gmail_account(request)
        message = self._message_of(box, request.match_info["id"])
        fmt = request.query.get("format", "full")
        return _json(self._render(message, fmt, request.query.getall("metadataHeaders", [])))

    async def _gmail_messages_send(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _BODY, _json

        box = self._gmail_account(request)
        body = request[_BODY]
        raw = self._raw_of(request, body)
        account = next(a for a, b in self.mail.items() if b is box)
        message = self._store(account, raw, ["SENT"], (body or {}).get("threadId"))
        return _json({"id": message["id"], "threadId": message["threadId"], "labelIds": ["SENT"]})

    # -- drafts --------------------------------------------------------------------------

    def _draft_json(self, ident: str, message: dict, fmt: str = "full") -> dict:
        return {"id": ident, "message": self._render(message, fmt)}

    async def _gmail_drafts_create(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _BODY, _json

        box = self._gmail_account(request)
        body = request[_BODY] or {}
        message_body = body.get("message") or {}
        raw = self._raw_of(request, message_body)
        account = next(a for a, b in self.mail.items() if b is box)
        message = self._store(account, raw, ["DRAFT"], message_body.get("threadId"))
        ident = f"r{next(self._gmail_ids)}"
        box["drafts"][ident] = message["id"]
        return _json({"id": ident, "message": {"id": message["id"],
                                               "threadId": message["threadId"],
                                               "labelIds": ["DRAFT"]}})

    async def _gmail_drafts_get(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _json

        box = self._gmail_account(request)
        ident = request.match_info["id"]
        message = self._draft_of(box, ident)
        return _json(self._draft_json(ident, message, request.query.get("format", "full")))

    async def _gmail_drafts_list(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _json

        box = self._gmail_account(request)
        drafts = [
            {"id": d, "message": {"id": m, "threadId": box["messages"][m]["threadId"]}}
            for d, m in box["drafts"].items()
        ]
        return _json({"drafts": drafts, "resultSizeEstimate": len(drafts)} if drafts else
                     {"resultSizeEstimate": 0})

    async def _gmail_drafts_update(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _BODY, _json

        box = self._gmail_account(request)
        ident = request.match_info["id"]
        message = self._draft_of(box, ident)
        message["raw"] = self._raw_of(request, (request[_BODY] or {}).get("message"))
        return _json(self._draft_json(ident, message))

    async def _gmail_drafts_delete(self, request: web.Request) -> web.Response:
        box = self._gmail_account(request)
        ident = request.match_info["id"]
        message = self._draft_of(box, ident)
        del box["drafts"][ident]
        del box["messages"][message["id"]]
        return web.Response(status=204)

    async def _gmail_drafts_send(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _BODY, _bad, _json

        box = self._gmail_account(request)
        ident = str((request[_BODY] or {}).get("id") or "")
        if not ident:
            raise _bad("Invalid draft", "invalidArgument")
        message = self._draft_of(box, ident)
        del box["drafts"][ident]
        message["labelIds"] = ["SENT"]
        number = next(self._gmail_ids)
        message["historyId"] = str(number)
        box["history"].append({"id": str(number), "messagesAdded": [{"message": {
            "id": message["id"], "threadId": message["threadId"], "labelIds": ["SENT"]}}]})
        return _json({"id": message["id"], "threadId": message["threadId"],
                      "labelIds": ["SENT"]})

    # -- history -------------------------------------------------------------------------

    async def _gmail_history_list(self, request: web.Request) -> web.Response:
        from tests.fakes.google_server import _bad, _json

        box = self._gmail_account(request)
        start = request.query.get("startHistoryId")
        if not start or not start.isdigit():
            raise _bad("Invalid startHistoryId", "invalidArgument")
        records = [h for h in box["history"] if int(h["id"]) > int(start)]
        latest = box["history"][-1]["id"] if box["history"] else start
        out: dict[str, Any] = {"historyId": latest}
        if records:
            out["history"] = records
        return _json(out)

    def _gmail_routes(self) -> list[web.RouteDef]:
        base = "/gmail/v1/users/{userId}"
        return [
            web.get(base + "/messages", self._gmail_messages_list),
            web.post(base + "/messages/send", self._gmail_messages_send),
            web.get(base + "/messages/{id}", self._gmail_messages_get),
            web.get(base + "/drafts", self._gmail_drafts_list),
            web.post(base + "/drafts", self._gmail_drafts_create),
            web.post(base + "/drafts/send", self._gmail_drafts_send),
            web.get(base + "/drafts/{id}", self._gmail_drafts_get),
            web.put(base + "/drafts/{id}", self._gmail_drafts_update),
            web.delete(base + "/drafts/{id}", self._gmail_drafts_delete),
            web.get(base + "/history", self._gmail_history_list),
        ]

    def fail_gmail(self, status: int, reason: str, message: str) -> None:
        """The next Gmail request answers this error (as Gmail would render it)."""
        self.gmail_failures.append((status, reason, message))

    def _init_gmail(self) -> None:
        self.gmail_failures: list[tuple[int, str, str]] = []
        self.mail: dict[str, dict] = {}
        self._gmail_ids = itertools.count(0x18C0_0000_0000)


def _matches(message: dict, query: str | None) -> bool:
    if not query:
        return True
    mail = BytesParser(policy=policy.default).parsebytes(message["raw"])
    try:
        terms = shlex.split(query)
    except ValueError:
        terms = query.split()
    for term in terms:
        key, _, value = term.partition(":") if ":" in term else ("", "", term)
        value = value.lower()
        if key in ("from", "to", "subject"):
            if value not in str(mail.get(key, "")).lower():
                return False
        elif key == "is" and value == "unread":
            if "UNREAD" not in message["labelIds"]:
                return False
        elif key in ("in", "label"):
            if value.upper() not in message["labelIds"]:
                return False
        elif key:
            continue  # newer_than:, has:, … accepted, not applied
        else:
            haystack = " ".join(
                [str(mail.get("from", "")), str(mail.get("subject", "")), _plain_text(mail)]
            ).lower()
            if value not in haystack:
                return False
    return True
