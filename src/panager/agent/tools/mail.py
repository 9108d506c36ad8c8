"""Gmail tools (SPEC §2): search, read, draft, and send only what the person approved.

Everything read from Gmail is outside content: framed once, whole, where it
enters (`frame("Gmail", …)`), so the turn is tainted from then on. Drafting is
ordinary (the person sees the draft in Gmail and can delete it). `email_send`
is consequential and asked about on every call, tainted or not
(`always_ask`): the question shows the draft as Gmail holds it at that moment
(To, Cc, Bcc, subject, full body) and records its digest under the call's key;
the send, after Approve, fetches the draft again and goes ahead only when the
digest is unchanged — and only once per question (`services/accounts/shown.py`).
A call with no recorded question (nobody was asked) sends nothing.

The four schemas are offered only to a person whose accounts have the mail
capabilities (`offered_mail_tools`, from the capabilities read once per turn);
otherwise they stay unlisted and a call ends in the
usual link (asking for Gmail on top of what was granted) and replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
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
from panager.providers.google import gmail
from panager.providers.google.service import (
    GMAIL_COMPOSE_SCOPE,
    GMAIL_READ_SCOPE,
    NOT_CONFIGURED,
)
from panager.services.accounts.provider import Capability
from panager.services.accounts.service import Connected
from panager.services.accounts.shown import DraftsShown
from panager.services.users import User

READ_TOOLS = frozenset({"email_search", "email_read"})
COMPOSE_TOOLS = frozenset({"email_draft", "email_send"})
MAIL_TOOL_NAMES = READ_TOOLS | COMPOSE_TOOLS
SOURCE = "Gmail"
MAX_LIMIT = 50
MAX_QUERY = 500
MAX_SUBJECT = 500
MAX_BODY = 50_000
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


def mail_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """The four Gmail tools for `user`."""

    async def run(scope: str, operation: Any, **kwargs: Any) -> dict:
        if deps.google is None:
            raise ToolError(NOT_CONFIGURED)
        return await deps.google.call(user.id, scope, partial(operation, **kwargs))

    def shown() -> DraftsShown:
        assert deps.google is not None
        return DraftsShown(deps.google.pool, deps.clock)

    @tool(classify=ORDINARY)
    async def email_search(query: str, limit: int = 10) -> str:
        """Search the user's Gmail (Gmail query syntax, e.g. 'from:ann newer_than:7d');
        returns id, from, subject, date, snippet."""
        words = _text((query or "").strip(), "query", MAX_QUERY)
        count = max(1, min(int(limit), MAX_LIMIT))
        return frame(SOURCE, await run(GMAIL_READ_SCOPE, gmail.search, query=words, limit=count))

    @tool(classify=ORDINARY)
    async def email_read(message_id: str) -> str:
        """Read one e-mail by message_id: headers, text, attachment names."""
        ident = _ident(message_id, "message_id")
        return frame(SOURCE, await run(GMAIL_READ_SCOPE, gmail.read, message_id=ident))

    @tool(classify=ORDINARY)
    async def email_draft(
        to: str, subject: str, body: str, reply_to_id: str | None = None
    ) -> dict:
        """Save an e-mail as a Gmail draft (not sent); reply_to_id makes it a reply in
        that message's thread."""
        return await run(
            GMAIL_COMPOSE_SCOPE,
            gmail.create_draft,
            to=gmail.addresses(to or "", "to"),
            subject=_text((subject or "").replace("\r", " ").replace("\n", " "), "subject",
                          MAX_SUBJECT),
            body=_text(body or "", "body", MAX_BODY),
            reply_to_id=_ident(reply_to_id, "reply_to_id") if reply_to_id else None,
        )

    @tool(classify=CONSEQUENTIAL)
    async def email_send(draft_id: str) -> dict:
        """Send a Gmail draft by draft_id; the user is always asked first."""
        ident = _ident(draft_id, "draft_id")
        key = CURRENT_CALL.get()
        await run(GMAIL_COMPOSE_SCOPE, gmail.draft_view, draft_id=ident)  # link, unknown id
        digest = await shown().take(user.id, key, ident) if key else None
        if digest is None:
            raise ToolError(NOT_ASKED)
        return await run(GMAIL_COMPOSE_SCOPE, gmail.send_draft, draft_id=ident, digest=digest)

    async def prepare_send(args: Mapping[str, Any], key: str) -> str:
        """Fetch the draft now, record its digest under `key`, show it whole."""
        ident = _ident(str(args.get("draft_id", "")), "draft_id")
        view = await run(GMAIL_COMPOSE_SCOPE, gmail.draft_view, draft_id=ident)
        await shown().remember(user.id, key, ident, view["digest"])
        assert deps.google is not None
        account = await deps.google.account(user.id)
        return draft_question({**view, "sender": account.email if account else None})

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
