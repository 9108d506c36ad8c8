"""Mail tools (SPEC §2): search, read, draft, and send only what the person approved.

Written once against the provider contract's `Mailbox` (Gmail today, through
`deps.accounts`). Everything read from a mailbox is outside content: framed
once, whole, where it enters (`frame(mailbox.name, …)`, "Gmail"), so the turn
is tainted from then on. Drafting is ordinary (the person sees the draft in
their mail and can delete it). `email_send` is consequential and asked about
on every call, tainted or not (`always_ask`): the question shows the draft as
the server holds it at that moment (To, Cc, Bcc, subject, full body) and
records its digest under the call's key; the send, after Approve, fetches the
draft again and goes ahead only when the digest is unchanged — and only once
per question (`services/accounts/shown.py`). A call with no recorded question
(nobody was asked) sends nothing.

The four schemas are offered only to a person whose accounts have the mail
capabilities (`offered_mail_tools`, from the capabilities read once per turn);
otherwise they stay unlisted and a call ends in the
usual link (asking for Gmail on top of what was granted) and replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    CURRENT_CALL,
    ORDINARY,
    always_ask,
    shown_block,
    shown_text,
    tool,
)
from panager.errors import ToolError
from panager.framing import frame
from panager.services.accounts.mail import addresses
from panager.services.accounts.provider import Account, Capability, Mail, Mailbox, MailSummary
from panager.services.accounts.service import NOT_CONFIGURED, Connected
from panager.services.accounts.shown import DraftsShown
from panager.services.users import User

READ_TOOLS = frozenset({"email_search", "email_read"})
COMPOSE_TOOLS = frozenset({"email_draft", "email_send"})
MAIL_TOOL_NAMES = READ_TOOLS | COMPOSE_TOOLS
MAX_LIMIT = 50
MAX_QUERY = 500
MAX_SUBJECT = 500
MAX_BODY = 50_000
DRAFTED = (
    "Saved as a draft, not sent. email_send(draft_id) sends it once the person approves the "
    "draft as shown to them."
)
NOT_ASKED = (
    "Not sent: email_send runs only after the person approved the draft as it was shown to "
    "them, and no such question was asked for this call."
)


def _ident(value: str, what: str) -> str:
    ident = (value or "").strip()
    if not ident or len(ident) > 200 or not ident.replace("-", "").replace("_", "").isalnum():
        raise ToolError(f"{what} {value!r} is not a Gmail id; use one a mail tool returned.")
    return ident


def _text(value: str, what: str, limit: int) -> str:
    if len(value) > limit:
        raise ToolError(f"{what} is {len(value):,} characters; keep it under {limit:,}.")
    return value


def draft_question(view: Mapping[str, Any]) -> str:
    """The words of the send question: the draft exactly as Gmail holds it now."""
    lines = [f"Send this e-mail (Gmail draft {shown_text(str(view['draft_id']))}) from "
             f"{shown_text(str(view.get('sender') or 'your Gmail account'))}:"]
    for label, key in (("To", "to"), ("Cc", "cc"), ("Bcc", "bcc"), ("Subject", "subject")):
        lines.append(f"- {label}: {shown_text(str(view.get(key) or ''))}")
    if view.get("attachments"):
        names = ", ".join(shown_text(str(n)) for n in view["attachments"])
        lines.append(f"- Attachments: {names}")
    lines.append(f"- Body:\n{shown_block(str(view.get('body') or ''))}")
    return "\n".join(lines)


def search_view(query: str, found: list[MailSummary]) -> dict[str, Any]:
    """What email_search shows the model."""
    messages = [{"id": m.id, "from": m.sender, "subject": m.subject, "date": m.date,
                 "snippet": m.snippet} for m in found]
    return {"query": query, "count": len(messages), "messages": messages}


def mail_view(mail: Mail) -> dict[str, Any]:
    """What email_read shows the model (empty fields left out)."""
    view = {
        "id": mail.id,
        "thread_id": mail.thread_id or None,
        "from": mail.sender,
        "to": mail.to,
        "cc": mail.cc or None,
        "subject": mail.subject,
        "date": mail.date,
        "text": mail.text,
        "attachments": [{"filename": a.name, "type": a.type, "size": a.size}
                        for a in mail.attachments] or None,
    }
    return {k: v for k, v in view.items() if v is not None}


def mail_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """The four mail tools for `user`."""

    async def mailbox(capability: Capability) -> tuple[Account, Mailbox]:
        if deps.accounts is None:
            raise ToolError(NOT_CONFIGURED)
        _, account, box = await deps.accounts.mailbox_for(user.id, capability)
        return account, box

    def shown() -> DraftsShown:
        return DraftsShown(deps.pool, deps.clock)

    @tool(classify=ORDINARY)
    async def email_search(query: str, limit: int = 10) -> str:
        """Search the user's Gmail (Gmail query syntax, e.g. 'from:ann newer_than:7d');
        returns id, from, subject, date, snippet."""
        words = _text((query or "").strip(), "query", MAX_QUERY)
        count = max(1, min(int(limit), MAX_LIMIT))
        _, box = await mailbox(Capability.MAIL_READ)
        return frame(box.name, search_view(words, await box.search(words, count)))

    @tool(classify=ORDINARY)
    async def email_read(message_id: str) -> str:
        """Read one e-mail by message_id: headers, text, attachment names."""
        ident = _ident(message_id, "message_id")
        _, box = await mailbox(Capability.MAIL_READ)
        return frame(box.name, mail_view(await box.read(ident)))

    @tool(classify=ORDINARY)
    async def email_draft(
        to: str, subject: str, body: str, reply_to_id: str | None = None
    ) -> dict:
        """Save an e-mail as a Gmail draft (not sent); reply_to_id makes it a reply in
        that message's thread."""
        to = addresses(to or "", "to")
        subject = _text((subject or "").replace("\r", " ").replace("\n", " "), "subject",
                        MAX_SUBJECT)
        reply = _ident(reply_to_id, "reply_to_id") if reply_to_id else None
        _, box = await mailbox(Capability.MAIL_DRAFT)
        made = await box.draft(to, subject, _text(body or "", "body", MAX_BODY), reply)
        return {"ok": True, "draft_id": made, "to": to, "subject": subject,
                "reply_to_id": reply, "note": DRAFTED}

    @tool(classify=CONSEQUENTIAL)
    async def email_send(draft_id: str) -> dict:
        """Send a Gmail draft by draft_id; the user is always asked first."""
        ident = _ident(draft_id, "draft_id")
        key = CURRENT_CALL.get()
        _, box = await mailbox(Capability.MAIL_SEND)
        view = await box.draft_view(ident)  # the link, or an unknown id
        digest = await shown().take(user.id, key, ident) if key else None
        if digest is None:
            raise ToolError(NOT_ASKED)
        sent = await box.send_draft(ident, digest)
        return {"ok": True, "sent": True, "message_id": sent, "to": view.to,
                "subject": view.subject}

    async def prepare_send(args: Mapping[str, Any], key: str) -> str:
        """Fetch the draft now, record its digest under `key`, show it whole."""
        ident = _ident(str(args.get("draft_id", "")), "draft_id")
        account, box = await mailbox(Capability.MAIL_SEND)
        view = await box.draft_view(ident)
        await shown().remember(user.id, key, ident, view.digest)
        return draft_question({"draft_id": view.id, "sender": account.label, "to": view.to,
                               "cc": view.cc, "bcc": view.bcc, "subject": view.subject,
                               "attachments": list(view.attachments), "body": view.body})

    always_ask(email_send, prepare_send)
    return [email_search, email_read, email_draft, email_send]


def offered_mail_tools(
    connected: Connected, offered: list[BaseTool], unlisted: list[BaseTool]
) -> tuple[list[BaseTool], list[BaseTool]]:
    """(offered, unlisted): the mail tools offered only for the mail capabilities the
    person's accounts have (`connected`, read once this turn); the others stay unlisted (a
    call still ends in the link asking for Gmail)."""
    can = connected.capabilities
    allowed = (READ_TOOLS if Capability.MAIL_READ in can else frozenset()) | (
        COMPOSE_TOOLS if Capability.MAIL_DRAFT in can else frozenset()
    )
    held = [t for t in offered if t.name in MAIL_TOOL_NAMES and t.name not in allowed]
    offered[:] = [t for t in offered if t not in held]  # in place: google_load extends it
    unlisted.extend(held)
    return offered, unlisted
