"""What the calendar and task tools share: reading the model's arguments (times in the
person's zone, bounded texts, ids as their provider takes them), the compact views the model
reads, the words of questions, and the account service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from panager.agent.deps import AgentDeps
from panager.agent.graph.tool import Describer, shown_text
from panager.errors import ToolError
from panager.services.accounts.provider import GOOGLE, Capability, Provider, split_id
from panager.services.accounts.service import NOT_CONFIGURED, AccountService

MAX_TITLE = 1_000
MAX_TEXT = 8_000
TEXT_LIMIT = 300  # of a description or location in a listing


def parse_time(value: str, zone: Any, what: str) -> date | datetime:
    """A date, or an aware datetime (no offset: the user's zone), from ISO 8601 text."""
    text = (value or "").strip()
    try:
        if len(text) == 10:
            return date.fromisoformat(text)
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            f"Could not read {what} {value!r}. Use ISO 8601: '2026-11-25T09:00' (local time in "
            f"{zone.key}), '2026-11-25T09:00+09:00' (explicit offset) or '2026-11-25' (a date)."
        ) from None
    return moment.replace(tzinfo=zone) if moment.tzinfo is None else moment


def day_of(value: date | datetime, zone: Any) -> date:
    return value.astimezone(zone).date() if isinstance(value, datetime) else value


def range_start(value: date | datetime, zone: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.combine(value, datetime.min.time(), zone)


def limited(value: str | None, what: str, limit: int = MAX_TEXT) -> str | None:
    if value is not None and len(value) > limit:
        raise ToolError(f"{what} is {len(value):,} characters; keep it under {limit:,}.")
    return value


def title_text(value: str) -> str:
    title = (value or "").strip()
    if not title:
        raise ToolError("title must not be empty.")
    return limited(title, "title", MAX_TITLE) or title


def own_id(value: str, names: Sequence[str]) -> str:
    """An id as its provider takes it: Google's without a `google:` prefix, others whole."""
    name, raw = split_id(value, names)
    return raw if name == GOOGLE else value.strip()


def short(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "…"


def compact(view: dict) -> dict:
    return {k: v for k, v in view.items() if v not in (None, "", False)}


def local(value: date | datetime, zone: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(zone).isoformat(timespec="minutes")
    return value.isoformat()


def describe_change(what: str, key: str) -> Describer:
    """Plain words for a change or deletion: the item's id, then any new values."""

    def describe(args: Mapping[str, Any]) -> str:
        rest = {k: v for k, v in args.items() if k != key and v is not None}
        values = ", ".join(f"{k} = {shown_text(str(v))}" for k, v in rest.items())
        return f"{what} {shown_text(str(args.get(key, '')))}" + (f": {values}" if values else "")

    return describe


def new_values(args: Mapping[str, Any], skip: tuple[str, ...]) -> list[str]:
    """A question's lines for the new values of a change (only the fields given)."""
    new = {k: v for k, v in args.items() if k not in skip and v is not None}
    lines = ["  - to these new values:" if new else "  - with no new values"]
    return lines + [f"    - {k} → {shown_text(str(v))}" for k, v in new.items()]


def thing(kind: str, key: str) -> Callable[[Mapping[str, Any]], str]:
    """Names the object of a call whose read failed ("event `"3k9…"`")."""
    return lambda args: f"{kind} {shown_text(str(args.get(key, '')))}"


def lookup_source(deps: AgentDeps, capability: Capability) -> str:
    """Who answers a question's read: the first provider offering `capability`."""
    offering = [p for p in (deps.accounts.providers if deps.accounts else [])
                if capability in p.capabilities]
    return offering[0].title if offering else "the provider"


def accounts_of(deps: AgentDeps) -> AccountService:
    if deps.accounts is None:
        raise ToolError(NOT_CONFIGURED)
    return deps.accounts


def source_of(providers: Sequence[Provider], what: str) -> str:
    titles = list(dict.fromkeys(p.title for p in providers))
    return ", ".join(f"{t} {what}" for t in titles) or what
