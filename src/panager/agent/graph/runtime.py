"""The agent runtime around the graph: effects, compaction, skills, sessions, activity, pruning.

`build_runtime` makes these pieces from the YAML runtime config before the
graph is built; the app passes `graph_effects` and the compactor's
`on_overflow` into `GraphConfig`, subscribes `subscribers()` to its event
emitter, and hands the whole `AgentRuntime` to slash commands through
`AgentDeps.runtime` (/debug, /compact, /skills, /save, …).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from panager.agent.graph.effects import Effect
from panager.agent.graph.effects.compact import Compact
from panager.agent.graph.effects.registry import (
    EffectServices,
    UsageRecorder,
    build_effects,
    resolve_context_window,
)
from panager.agent.graph.events import Event, Subscriber
from panager.agent.graph.recorders import ActivityLog, JsonEventLog, SessionRecorder
from panager.services.sessions import SessionStore
from panager.services.skills import SkillLibrary

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from panager.config import Settings

log = logging.getLogger(__name__)

PRUNE_EVERY_RUNS = 5


@dataclass(frozen=True)
class AgentRuntime:
    """The runtime pieces the graph, the event emitter and the commands share."""

    effects: list[Effect]  # as configured (shown by /debug)
    graph_effects: list[Effect]  # what the graph runs: the usage recorder, then `effects`
    compactor: Compact  # also used on a context-length refusal and by /compact
    skills: SkillLibrary
    sessions: SessionStore
    activity: ActivityLog
    context_window: int | None
    pruner: CheckpointPruner | None = None

    def subscribers(self) -> list[Subscriber]:
        """Event subscribers: JSON log, session recording, /debug activity, pruning."""
        found: list[Subscriber] = [JsonEventLog(), SessionRecorder(self.sessions), self.activity]
        return [*found, self.pruner] if self.pruner is not None else found


class CheckpointPruner:
    """Keeps each thread's checkpoint storage bounded: `aprune(keep_latest)` every few runs.

    A prune costs a roughly fixed 5–15 ms of database work whatever it deletes, so it
    runs on a user's first run in this process and then every `every` runs, in the
    background after the reply (LangGraph's prune is safe beside a running turn), so
    it never delays an answer. At most one prune per thread is in flight.
    """

    def __init__(self, checkpointer: BaseCheckpointSaver, every: int = PRUNE_EVERY_RUNS) -> None:
        self.checkpointer = checkpointer
        self.every = every
        self._runs: Counter[int] = Counter()
        self._running: dict[int, asyncio.Task[None]] = {}

    async def __call__(self, event: Event) -> None:
        """On agent_end: maybe start a background prune of that user's thread."""
        if event.type != "agent_end":
            return
        user_id = event.user_id
        runs, self._runs[user_id] = self._runs[user_id], self._runs[user_id] + 1
        if runs % self.every or user_id in self._running:
            return
        task = asyncio.create_task(self.prune(user_id))
        self._running[user_id] = task
        task.add_done_callback(lambda _: self._running.pop(user_id, None))

    async def prune(self, user_id: int) -> None:
        """Delete all but the latest checkpoint of the user's thread (errors are logged)."""
        try:
            await self.checkpointer.aprune([str(user_id)], strategy="keep_latest")
        except Exception as exc:  # e.g. another process pruning the same thread right now
            log.warning("checkpoint pruning skipped for user %s: %s", user_id, exc)

    async def drain(self) -> None:
        """Wait for the prunes in flight (tests, benchmarks, shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)


def build_runtime(
    settings: Settings, checkpointer: BaseCheckpointSaver, services: EffectServices
) -> AgentRuntime:
    """The runtime for `settings.runtime` (effects from YAML, or the defaults)."""
    config = settings.runtime
    effects = build_effects(config, services, settings.model)
    compactor = next((e for e in effects if isinstance(e, Compact)), None) or Compact(
        context_window=config.context_window,
        history_max_tokens=config.history_max_tokens,
        usage=services.usage,
        memory=services.memory,
        clock=services.clock,
    )
    return AgentRuntime(
        effects=effects,
        graph_effects=[UsageRecorder(services.usage), *effects],
        compactor=compactor,
        skills=SkillLibrary(settings.home / "skills", enabled=config.skills),
        sessions=SessionStore(
            settings.home,
            max_files=config.saved_sessions_max,
            max_bytes=config.saved_sessions_max_bytes,
        ),
        activity=ActivityLog(),
        context_window=resolve_context_window(config, settings.model),
        pruner=CheckpointPruner(checkpointer) if config.checkpoint_pruning else None,
    )
