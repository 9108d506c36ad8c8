"""The nightly tidy-up of a person's memories (a `tidy` system job, agent/flows/jobs.py).

Once a night, for a person who was active that day (tokens used, or memories
saved or changed since the last tidy-up), within a token cap
(`memory_tidy_tokens`):

1. exact duplicates are merged (no model call);
2. pairs of similar memories where the newer may replace the older are shown to
   the model in one structured call (`SupersededMemories`); the older one of each
   pair it names is *marked* superseded — kept with its history, left out of
   search and recall;
3. recent memories saved in **untainted** calls (the person's own statements, never
   text read from outside) are shown with the current profile in one structured
   call (`ProfileChanges`); each change becomes a *proposal* that applies only when
   the person approves it (`/profile`, the memories page).

The person is not messaged; `/memory` shows what the last tidy-up did.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from panager.errors import ModelUnavailable
from panager.llm import decide_with_retries
from panager.model_router import answered_by
from panager.services.memory.tidy import MemoryTidy, Pair, Stated
from panager.services.profile import SECTIONS, ProfileInputError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from panager.agent.deps import AgentDeps
    from panager.services.schedules.types import Schedule
    from panager.services.users import User

log = logging.getLogger(__name__)

PAIR_BAR = 0.85  # similarity at which an older memory may have been replaced
MAX_PAIRS = 20
MAX_STATED = 30
SUPERSEDE_SYSTEM = (
    "You tidy a person's saved memories. Each pair below is a newer and an older memory "
    "on a similar topic (quoted data). Name the pairs where the newer memory replaces the "
    "older one — a corrected or changed fact (moved city, new phone number). Do not name "
    "pairs where both stay true. Call SupersededMemories once."
)
PROFILE_SYSTEM = (
    "You keep a person's short profile (sections: about, people, preferences, "
    "instructions; at most 1,500 characters in all). Below are the current profile and "
    "facts the person recently stated themselves. Propose changes only for lasting facts "
    "that belong in the profile and are not there yet; each change is the whole new text "
    "of one section. The person approves each change. Call ProfileChanges once (an empty "
    "list when nothing belongs there)."
)


class SupersededPair(BaseModel):
    """One replaced memory."""

    old_id: str
    new_id: str


class SupersededMemories(BaseModel):
    """The pairs in which the newer memory replaces the older."""

    superseded: list[SupersededPair] = Field(default_factory=list)


class ProfileChange(BaseModel):
    """A proposed section text."""

    section: str
    text: str
    reason: str = ""


class ProfileChanges(BaseModel):
    """Profile changes to propose to the person."""

    changes: list[ProfileChange] = Field(default_factory=list)


class TidyBudget:
    """Tokens one night may spend; estimates a call before it is made."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0

    def allows(self, messages: list[AnyMessage]) -> bool:
        """Whether a call with these messages (chars / 4, plus room for the answer) fits."""
        estimate = sum(len(str(m.content)) for m in messages) // 4 + 300
        return self.used + estimate <= self.cap

    def spend(self, usage: dict[str, Any]) -> None:
        """Count a call's tokens."""
        self.used += int(usage.get("total_tokens") or 0)


class MemoryTidyJob:
    """One person's nightly tidy-up."""

    def __init__(self, deps: AgentDeps, model: BaseChatModel | None) -> None:
        self.deps = deps
        self.model = model
        self.tidy = MemoryTidy(deps.pool)

    async def run(self, user: User, job: Schedule, now: datetime) -> dict[str, Any]:
        """Tidy once; returns what was done (also stored on the job for /memory)."""
        last = (job.params or {}).get("last_run")
        since = datetime.fromisoformat(last) if last else now - timedelta(days=1)
        active = await self.deps.usage.today_total(user) > 0
        if not active and not await self.tidy.changed_since(user.id, since):
            return {"skipped": True}
        budget = TidyBudget(self.deps.config.memory_tidy_tokens)
        result: dict[str, Any] = {
            "at": now.isoformat(),
            "merged": await self.tidy.merge_duplicates(user.id),
            "superseded": await self._supersede(user, since, now, budget),
            "proposed": await self._propose(user, since, budget),
        }
        result["tokens"] = budget.used
        await self._note(user, {"last_run": now.isoformat(), "result": result})
        return result

    async def _note(self, user: User, values: dict[str, Any]) -> None:
        jobs = self.deps.system_jobs
        if jobs is not None:
            await jobs.note(user.id, "tidy", values)

    async def _decide(
        self, user: User, schema: type[BaseModel], messages: list[AnyMessage], budget: TidyBudget
    ) -> BaseModel | None:
        if self.model is None or not budget.allows(messages):
            return None
        try:
            reply = await decide_with_retries(self.model, schema, messages)
        except ModelUnavailable:
            log.warning("tidy-up: model unavailable for user %s", user.id)
            return None
        usage = dict(reply.usage_metadata or {})
        budget.spend(usage)
        name = answered_by(reply, str(getattr(self.model, "model_name", None) or "model"))
        await self.deps.usage.record(user, name, usage)
        for call in reply.tool_calls:
            try:
                return schema.model_validate(call["args"])
            except ValueError:
                break
        return None

    async def _supersede(
        self, user: User, since: datetime, now: datetime, budget: TidyBudget
    ) -> int:
        pairs = await self.tidy.pairs(user.id, since, PAIR_BAR, MAX_PAIRS)
        if not pairs:
            return 0
        messages: list[AnyMessage] = [SystemMessage(SUPERSEDE_SYSTEM), HumanMessage(_pairs(pairs))]
        found = await self._decide(user, SupersededMemories, messages, budget)
        if not isinstance(found, SupersededMemories):
            return 0
        offered = {(p.old_id, p.new_id) for p in pairs}
        done = 0
        for pair in found.superseded:
            if (pair.old_id, pair.new_id) in offered:  # only pairs it was shown
                done += await self.tidy.supersede(user.id, pair.old_id, pair.new_id, now)
        return done

    async def _propose(self, user: User, since: datetime, budget: TidyBudget) -> int:
        profiles = self.deps.profiles
        if profiles is None:
            return 0
        stated = await self.tidy.stated(user.id, since, MAX_STATED)
        if not stated:
            return 0
        profile = await profiles.get(user.id)
        messages: list[AnyMessage] = [
            SystemMessage(PROFILE_SYSTEM),
            HumanMessage(_stated(profile.sections, stated)),
        ]
        found = await self._decide(user, ProfileChanges, messages, budget)
        if not isinstance(found, ProfileChanges):
            return 0
        proposed = 0
        for change in found.changes:
            text = change.text.strip()
            if change.section not in SECTIONS or not text:
                continue
            if text == profile.sections.get(change.section):
                continue
            try:
                await profiles.propose(user.id, change.section, text, change.reason)
            except ProfileInputError:
                continue
            proposed += 1
        return proposed


def _pairs(pairs: list[Pair]) -> str:
    rows = [
        {"old_id": p.old_id, "old": p.old_content, "new_id": p.new_id, "new": p.new_content}
        for p in pairs
    ]
    return "Pairs (newer replaces older?):\n" + json.dumps(rows, ensure_ascii=False)


def _stated(sections: dict[str, str], stated: list[Stated]) -> str:
    facts = [{"id": s.id, "fact": s.content, "category": s.category} for s in stated]
    return (
        "Current profile:\n" + json.dumps(sections, ensure_ascii=False)
        + "\nFacts the person stated:\n" + json.dumps(facts, ensure_ascii=False)
    )


def tidy_line(job: Schedule | None, waiting: int) -> str | None:
    """'Tidied 25 Nov: 3 merged, 1 superseded; 1 profile change waiting.' for /memory."""
    result = ((job.params or {}).get("result") if job is not None else None) or {}
    if not result and not waiting:
        return None
    parts = []
    if result.get("at"):
        when = datetime.fromisoformat(result["at"]).strftime("%d %b")
        parts.append(
            f"Tidied {when}: {result.get('merged', 0)} merged, "
            f"{result.get('superseded', 0)} superseded"
        )
    if waiting:
        parts.append(f"{waiting} profile change{'s' if waiting != 1 else ''} waiting (/profile)")
    return "; ".join(parts) + "."
