"""Wiring the agent runtime into the app: effects, overflow handling, usage, events, skills.

`install(app)` (in `INSTALLERS`) builds the effects from the YAML config,
hooks them into the graph (`effects`, `on_overflow`, `context_window`,
`skills_text`), creates the usage service, subscribes the JSON log, the
session recorder, the activity log and checkpoint pruning to `app.emitter`,
and enables `send_user_message` when the config allows it. Commands reach the
pieces through `runtime_of(deps)`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage

from panager.agent.effects.compact import Compact
from panager.agent.effects.registry import UsageRecorder, build_effects, resolve_context_window
from panager.agent.effects.windows import learn_served_window
from panager.agent.events import Event
from panager.agent.recorders import ActivityLog, JsonEventLog, SessionRecorder
from panager.agent.threads import update_thread
from panager.agent.tools.messaging import UserMessageRelay
from panager.services.sessions import SessionStore
from panager.services.skills import SkillLibrary
from panager.services.usage import UsageService

log = logging.getLogger(__name__)

PRUNE_EVERY_RUNS = 5


@dataclass
class Runtime:
    """The runtime pieces commands need."""

    effects: list
    compactor: Compact
    skills: SkillLibrary
    sessions: SessionStore
    activity: ActivityLog
    context_window: int | None
    pruner: CheckpointPruner | None = None


def runtime_of(deps: Any) -> Runtime | None:
    """The installed runtime, or None (e.g. a bare graph in a test)."""
    return deps.extra.get("runtime")


class CheckpointPruner:
    """Keeps each thread's checkpoint storage bounded: `aprune(keep_latest)` every few runs.

    A prune costs a roughly fixed 5–15 ms of database work whatever it deletes, so it
    runs on a user's first run in this process and then every `every` runs, in the
    background after the reply (LangGraph's prune is safe beside a running turn), so
    it never delays an answer. At most one prune per thread is in flight.
    """

    def __init__(self, checkpointer: Any, every: int = PRUNE_EVERY_RUNS) -> None:
        self.checkpointer = checkpointer
        self.every = every
        self._runs: Counter[int] = Counter()
        self._running: dict[int, asyncio.Task] = {}

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


async def install(app: Any) -> None:
    """Build and hook the runtime into `app`."""
    settings, config, deps = app.settings, app.settings.runtime, app.deps
    deps.usage = UsageService(app.pool, app.clock)
    await learn_served_window(settings)  # a local server's real window, before effects use it
    effects = build_effects(config, deps, settings.model)
    compactor = next((e for e in effects if isinstance(e, Compact)), None) or Compact(
        context_window=config.context_window,
        history_max_tokens=config.history_max_tokens,
        deps=deps,
    )
    nodes = app.graph_nodes
    nodes.effects = [UsageRecorder(deps), *effects, *nodes.effects]
    nodes.context_window = resolve_context_window(config, settings.model)
    nodes.on_overflow = compactor.on_overflow
    skills = SkillLibrary(settings.home / "skills", enabled=config.skills)
    nodes.skills_text = lambda ctx, state: skills.prompt_sections(
        list(state.get("loaded_skills") or [])
    )
    sessions = SessionStore(settings.home)
    activity = ActivityLog()
    for subscriber in (JsonEventLog(), SessionRecorder(sessions), activity):
        app.emitter.subscribe(subscriber)
    pruner = CheckpointPruner(app.checkpointer) if config.checkpoint_pruning else None
    if pruner is not None:
        app.emitter.subscribe(pruner)
        app.closers.append(pruner.drain)
    _install_user_messages(app)
    deps.extra["runtime"] = Runtime(
        effects, compactor, skills, sessions, activity, nodes.context_window, pruner
    )


def _install_user_messages(app: Any) -> None:
    async def inject(recipient: Any, message: HumanMessage) -> None:
        await update_thread(app.assistant, recipient, {"messages": [message]})

    relay = UserMessageRelay(app.deps, inject)
    app.deps.extra["user_messages"] = relay
    app.closers.append(relay.drain)
