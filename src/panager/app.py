"""Application wiring: config → database → model → services → graph → assistant.

`App.start()` owns start-up (embedded PostgreSQL or DATABASE_URL, schema
upgrade under an advisory lock, the shared pool, the checkpointer) and
`App.stop()` tears it down. Front ends (`cli/`, `discord/`, `web/`) receive an
`App` and never build these pieces themselves.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool

from panager.agent.deps import AgentDeps
from panager.agent.events import EventEmitter
from panager.agent.graph import build_graph
from panager.agent.messaging import FanoutMessenger
from panager.agent.runner import Assistant
from panager.clock import Clock, SystemClock
from panager.config import ConfigError, Settings
from panager.db import migrate
from panager.db.pool import open_pool, resolve_database_url
from panager.llm import invoke_with_retries, make_chat_model, stream_with_retries
from panager.services.users import User, UserService

log = logging.getLogger(__name__)

# Feature installers, run in order by App.start: `async def install(app: App) -> None`.
# Each creates its service, sets it on app.deps, hooks the graph (app.graph_nodes) and
# registers closers (app.closers) — so features plug in without editing this module.
INSTALLERS: list[str] = [
    "panager.agent.scheduling:install",
    "panager.services.memory.service:install",
    "panager.agent.google_link:install",
    "panager.agent.runtime:install",
]


class SchemaBehind(ConfigError):
    """The database schema is older than the code and auto-migration is off."""


@dataclass
class App:
    """The running application; build with `await App.start(settings)`."""

    settings: Settings
    clock: Clock
    url: str
    pool: AsyncConnectionPool
    checkpointer: AsyncPostgresSaver
    deps: AgentDeps
    assistant: Assistant
    emitter: EventEmitter
    model: BaseChatModel | None
    closers: list[Any] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        clock: Clock | None = None,
        model: BaseChatModel | None = None,
        migrate_schema: bool | None = None,
        pool_size: int = 20,
    ) -> App:
        """Open the database (migrating when allowed) and wire everything."""
        clock = clock or SystemClock()
        url = resolve_database_url(settings)
        await ensure_schema(
            url, settings.auto_migrate if migrate_schema is None else migrate_schema
        )
        pool = await open_pool(url, max_size=pool_size)
        checkpointer = AsyncPostgresSaver(pool)
        model = model or make_chat_model(settings)
        deps = AgentDeps(
            settings=settings,
            config=settings.runtime,
            clock=clock,
            users=UserService(pool, settings.timezone),
            pool=pool,
            messenger=FanoutMessenger(),
        )
        emitter = EventEmitter()
        graph = build_graph(
            checkpointer=checkpointer,
            model=model,
            clock=clock,
            invoke=_retrying_invoker(settings.runtime.model_retries),
            stream_invoke=_streaming_invoker(settings.runtime),
            max_iterations=settings.runtime.max_iterations,
            history_max_tokens=settings.runtime.history_max_tokens,
            max_tool_result_chars=settings.runtime.max_tool_result_chars,
        )
        assistant = Assistant(
            graph, deps, model_for=_model_selector(settings, model), emitter=emitter
        )
        app = cls(settings, clock, url, pool, checkpointer, deps, assistant, emitter, model)
        try:
            for path in INSTALLERS:
                module, _, name = path.partition(":")
                await getattr(importlib.import_module(module), name)(app)
        except BaseException:
            await app.stop()  # an installer refused (e.g. embedder mismatch): release the pool
            raise
        return app

    @property
    def graph_nodes(self):
        """The graph's node object: set `recall`, `effects`, `on_auth_required` here."""
        return self.assistant.graph.nodes_impl

    async def stop(self) -> None:
        """Close everything this app opened, newest first."""
        for closer in reversed(self.closers):
            try:
                await closer()
            except Exception:
                log.exception("error while stopping")
        await self.assistant.turn_locks.close()
        await self.pool.close()

    async def local_user(self) -> User:
        """The terminal user (created on first use)."""
        import getpass

        from panager.services.users import LOCAL_USER_ID

        try:
            name = getpass.getuser()
        except Exception:
            name = "me"
        return await self.deps.users.ensure(LOCAL_USER_ID, name, role="admin")


async def ensure_schema(url: str, auto_migrate: bool) -> None:
    """Upgrade the schema when behind (auto-migrate), else fail with the command to run."""
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        status = await migrate.schema_status(url, pool)
        if status.up_to_date:
            return
        if not auto_migrate:
            raise SchemaBehind(
                "the database schema is behind this version (PANAGER_AUTO_MIGRATE=false); "
                "run: panager db upgrade"
            )
        await migrate.upgrade(url, pool)
    finally:
        await pool.close()


def _retrying_invoker(retries: int):
    async def invoke(model, tools, messages):
        return await invoke_with_retries(model, tools, messages, retries=retries)

    return invoke


def _streaming_invoker(runtime):
    """The streamed model call (`stream: false` in the YAML turns it off)."""
    if not runtime.stream:
        return None

    retries = runtime.model_retries

    async def invoke(model, tools, messages, sink):
        return await stream_with_retries(model, tools, messages, sink, retries=retries)

    return invoke


def _model_selector(settings: Settings, default: BaseChatModel | None):
    """Per-user model override (`/model NAME`), cached per name."""
    cache: dict[str, BaseChatModel | None] = {}

    def model_for(user: User) -> BaseChatModel | None:
        if not user.model or user.model == settings.model or default is None:
            return default
        if user.model not in cache:
            cache[user.model] = make_chat_model(settings, user.model) or default
        return cache[user.model]

    return model_for
