# Over 400 lines, kept whole: the composition root: `App._wire` builds every piece in order, and the
# order is read in one file.
"""Application wiring: config → database → model → services → runtime → graph → assistant.

`App.start()` builds every piece once, in the order written below, and hands
each one what it needs — nothing is attached to the graph or the app later.
It owns start-up (embedded PostgreSQL or DATABASE_URL, schema upgrade under
an advisory lock, the shared pool, the checkpointer) and `App.stop()` tears it
down. Front ends (`cli/`, `discord/`, `web/`) receive an `App` and never build
these pieces themselves; they add their own messenger to `deps.messenger`.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from panager.agent.deps import AgentDeps
from panager.agent.flows.connect import LinkReplay, auth_hook
from panager.agent.flows.delivery import AssistantDelivery
from panager.agent.graph.build import build_graph
from panager.agent.graph.config import GraphConfig, GraphLimits, ModelInvoker, StreamInvoker
from panager.agent.graph.effects.registry import EffectServices
from panager.agent.graph.effects.windows import learn_served_window
from panager.agent.graph.events import EventEmitter
from panager.agent.graph.runtime import build_runtime
from panager.agent.graph.state import Recall
from panager.agent.turns.runner import Assistant, ModelSelector
from panager.agent.turns.threads import Threads, thread_asking, update_thread
from panager.agent.turns.turnlock import TurnLocks
from panager.clock import Clock, SystemClock
from panager.config import ConfigError, RuntimeConfig, Settings
from panager.db import migrate
from panager.db.breaker import CircuitBreakers
from panager.db.pool import Pool, open_pool, resolve_database_url
from panager.endpoints import model_endpoints
from panager.llm import invoke_with_retries, stream_with_retries
from panager.model_retries import TextSink
from panager.model_router import ModelRouter
from panager.providers.caldav.provider import CalDavProvider
from panager.providers.google.provider import GoogleProvider
from panager.providers.google.service import GoogleService
from panager.services.access import AccessService
from panager.services.accounts.connections import Connections
from panager.services.accounts.provider import Provider
from panager.services.accounts.sealing import Sealer
from panager.services.accounts.service import AccountService
from panager.services.backup.scheduled import BackupJob, Notify
from panager.services.linking import chat_route
from panager.services.mcp.hub import McpHub
from panager.services.mcp.pins import PinStore
from panager.services.media.documents import DocumentService
from panager.services.media.intake import MediaIntake, MediaLimits
from panager.services.media.sandbox import Limits
from panager.services.media.store import MediaStore
from panager.services.media.transcribe import Transcriber, TranscriptionConfig
from panager.services.memory.service import MemoryHit, MemoryService
from panager.services.messengers import FanoutMessenger
from panager.services.profile import ProfileService
from panager.services.proposals import ProposalService
from panager.services.relays.relay import UserMessageRelay
from panager.services.relays.store import RelayService
from panager.services.schedules.service import ScheduleLimits, ScheduleService
from panager.services.schedules.system import SystemJobService
from panager.services.schedules.worker import SchedulerWorker, WorkerOptions
from panager.services.usage import UsageService
from panager.services.users import LOCAL_USER_ID, User, UserService
from panager.services.web.fetch import WebFetcher
from panager.services.web.guard import AddressGuard, AllowList
from panager.services.web.search import SearchProvider, make_search
from panager.services.web_sessions import WebSessionService

log = logging.getLogger(__name__)

Closer = Callable[[], Awaitable[None]]
SECRET_KEY_MISSING = (
    "PANAGER_SECRET_KEY is not set: it is required once Google is configured "
    "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
)


@dataclass(frozen=True)
class Wired:
    """What a provider is built from (the services wired before it)."""

    settings: Settings
    pool: Pool
    clock: Clock
    google: GoogleService | None  # Google's linking and calls; None when not configured
    connections: Connections | None  # form-connected accounts; None without the secret key


def google_provider(wired: Wired) -> Provider | None:
    """Google, when its OAuth client is configured."""
    return GoogleProvider(wired.google) if wired.google is not None else None


def caldav_provider(wired: Wired) -> Provider | None:
    """CalDAV, when passwords can be sealed (PANAGER_SECRET_KEY); every request behind the
    address guard with web_fetch's allow list."""
    if wired.connections is None:
        return None
    guard = AddressGuard(allow=AllowList.parse(wired.settings.runtime.web_fetch_allow))
    return CalDavProvider(wired.pool, wired.connections, guard, clock=wired.clock)


# Every provider a person can connect — one line each, in order: the first calendar
# account is where "primary" and new events go until the person picks another.
PROVIDERS: list[Callable[[Wired], Provider | None]] = [google_provider, caldav_provider]


class SchemaBehind(ConfigError):
    """The database schema is older than the code and auto-migration is off."""


@dataclass
class App:
    """The running application; build with `await App.start(settings)`."""

    settings: Settings
    clock: Clock
    url: str
    pool: Pool
    checkpointer: AsyncPostgresSaver
    model: BaseChatModel | None
    deps: AgentDeps
    graph_config: GraphConfig
    assistant: Assistant
    emitter: EventEmitter
    link_replay: LinkReplay | None  # None when no provider connects by OAuth
    closers: list[Closer] = field(default_factory=list)  # run newest first by stop()
    backups: BackupJob | None = None  # scheduled backups (`backup:` in the config)

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
        config = settings.runtime
        url = resolve_database_url(settings)
        auto_migrate = settings.auto_migrate if migrate_schema is None else migrate_schema
        await ensure_schema(url, auto_migrate)
        if settings.google_configured and not settings.secret_key:
            raise ConfigError(SECRET_KEY_MISSING)
        pool = await open_pool(url, max_size=pool_size)
        try:
            return await cls._wire(settings, config, clock, url, pool, model)
        except BaseException:
            await pool.close()  # a service refused (e.g. embedder mismatch): release the pool
            raise

    @classmethod
    async def _wire(
        cls,
        settings: Settings,
        config: RuntimeConfig,
        clock: Clock,
        url: str,
        pool: Pool,
        model: BaseChatModel | None,
    ) -> App:
        """Services, runtime, graph and assistant, each built once, in this order."""
        checkpointer = AsyncPostgresSaver(pool)
        router = _router(settings, config, pool, clock)
        model = model or (router.model(model_endpoints(settings).default) if router else None)
        # 1. Services (each takes the pool; none knows about the agent).
        users = UserService(pool, settings.timezone)
        access = AccessService(
            pool,
            users,
            clock,
            mode=settings.access,
            admin_ids=settings.admin_ids,
            telegram_admin_ids=settings.telegram_admin_ids,
            admin_identities=settings.admin_identities(),
        )
        usage = UsageService(pool, clock)
        relays = RelayService(pool)
        web_sessions = WebSessionService(pool, clock)
        proposals = ProposalService(
            pool, ttl=timedelta(hours=settings.runtime.proposal_expiry_hours)
        )
        profiles = ProfileService(pool, clock)
        memory = await MemoryService.create(pool, settings, clock=clock)
        scheduler = ScheduleService(
            pool,
            clock,
            max_message_chars=config.max_message_chars,
            limits=ScheduleLimits.from_config(config),
        )
        google = GoogleService(pool, settings, clock) if settings.google_configured else None
        connections = (
            Connections(pool, clock, Sealer(settings.secret_key)) if settings.secret_key else None
        )
        wired = Wired(settings, pool, clock, google, connections)
        accounts = AccountService(
            [made for factory in PROVIDERS if (made := factory(wired)) is not None]
        )
        web, search = _web_services(config)
        messenger = FanoutMessenger(route=chat_route(pool))
        documents = DocumentService(pool, memory, clock, config.document_quota_bytes)
        media = make_media_intake(pool, settings, clock, documents)
        # 2. The agent runtime: effects (YAML), compaction, skills, sessions, activity —
        #    after asking a local model server which context window it really serves.
        await learn_served_window(settings)
        effect_services = EffectServices(usage, memory, access.is_admin, clock)
        runtime = build_runtime(settings, checkpointer, effect_services)
        # 3. The graph, configured before it is built.
        graph_config = GraphConfig(
            model=model,
            checkpointer=checkpointer,
            effects=runtime.graph_effects,
            recall=_recall(memory, config.memory_inject_limit),
            on_auth_required=auth_hook(accounts) if accounts.oauth_links() else None,
            on_overflow=runtime.compactor.on_overflow,
            skills_text=runtime.skills.prompt_sections,
            profile=_profile_loader(profiles),
            invoke=_retrying_invoker(config.model_retries),
            stream_invoke=_streaming_invoker(config),
            clock=clock,
            limits=GraphLimits(
                max_iterations=config.max_iterations,
                history_max_tokens=config.history_max_tokens,
                max_tool_result_chars=config.max_tool_result_chars,
            ),
            context_window=runtime.context_window,
            proposals=proposals,
        )
        threads = Threads(build_graph(graph_config), TurnLocks(url), config.max_iterations)
        # 4. What tools and commands use, then the assistant every front end calls.
        relay = None
        if config.allow_user_messages:
            relay = UserMessageRelay(
                users, relays, messenger, clock, _thread_injector(threads), _asking(threads)
            )
        mcp = await _start_mcp(settings, config, pool)
        deps = AgentDeps(
            settings=settings,
            config=config,
            clock=clock,
            pool=pool,
            users=users,
            access=access,
            usage=usage,
            relays=relays,
            web_sessions=web_sessions,
            scheduler=scheduler,
            messenger=messenger,
            runtime=runtime,
            memory=memory,
            accounts=accounts,
            connections=connections,
            relay=relay,
            web=web,
            search=search,
            mcp=mcp,
            system_jobs=SystemJobService(
                pool, clock, Sealer(settings.secret_key) if settings.secret_key else None
            ),
            proposals=proposals,
            media=media,
            profiles=profiles,
        )
        emitter = EventEmitter()
        for subscriber in runtime.subscribers():
            emitter.subscribe(subscriber)
        assistant = Assistant(
            threads, deps, model_for=_model_selector(settings, access, router, model),
            emitter=emitter,
        )
        assistant.background = router.background() if router else None
        runtime.compactor.background_model = assistant.background
        link_replay = (
            LinkReplay(accounts, users, assistant, messenger) if accounts.oauth_links() else None
        )
        closers: list[Closer] = [threads.locks.close]
        if runtime.pruner is not None:
            closers.append(runtime.pruner.drain)
        if relay is not None:
            closers.append(relay.drain)
        if mcp is not None:
            closers.append(mcp.stop)
        if memory.retrieval.reranker is not None:
            closers.append(memory.retrieval.reranker.aclose)
        backups = None
        if config.backup is not None:
            notify = _admin_notifier(access, users, messenger)
            backups = BackupJob(pool, clock, settings, config.backup, url, notify)
        return cls(
            settings, clock, url, pool, checkpointer, model, deps, graph_config, assistant,
            emitter, link_replay, closers, backups,
        )  # fmt: skip

    @property
    def google_link(self) -> LinkReplay | None:
        """The replay after linking, by its older name."""
        return self.link_replay

    async def stop(self) -> None:
        """Close everything this app opened, newest first, then the pool."""
        for closer in reversed(self.closers):
            try:
                await closer()
            except Exception:
                log.exception("error while stopping")
        await self.pool.close()

    async def local_user(self) -> User:
        """The terminal user (created on first use)."""
        try:
            name = getpass.getuser()
        except Exception:
            name = "me"
        return await self.deps.users.ensure_identity("terminal", LOCAL_USER_ID, name, role="admin")

    # -- scheduler workers --------------------------------------------------------------------

    def make_worker(
        self,
        *,
        only_users: Sequence[int] | None = None,
        skip_users: Sequence[int] = (),
        **options: Unpack[WorkerOptions],
    ) -> SchedulerWorker:
        """A worker on the app's pool, clock and runtime config (grace, poll, lease)."""
        config = self.settings.runtime
        tuned: WorkerOptions = {
            "grace_seconds": config.schedule_grace_seconds,
            "poll_seconds": config.scheduler_poll_seconds,
            "lease_seconds": config.scheduler_lease_seconds,
            "user_in_flight": config.scheduler_user_in_flight,
            "listen_url": self.url,
        }
        tuned.update(options)
        delivery = AssistantDelivery(self.deps.messenger, self.assistant)
        return SchedulerWorker(
            self.deps.scheduler,
            delivery,
            clock=self.clock,
            only_users=only_users,
            skip_users=skip_users,
            **tuned,
        )

    async def run_worker(
        self,
        stop: asyncio.Event,
        *,
        only_users: Sequence[int] | None = None,
        skip_users: Sequence[int] = (LOCAL_USER_ID,),
        **options: Unpack[WorkerOptions],
    ) -> None:
        """Deliver schedules until `stop` is set (`panager run --components worker`).

        By default every user but the terminal's local user, whose reminders only a
        terminal can show (`panager chat` runs its own worker for them)."""
        worker = self.make_worker(only_users=only_users, skip_users=skip_users, **options)
        if self.backups is None:
            await worker.run(stop)
            return
        await asyncio.gather(worker.run(stop), self.backups.run(stop))


def _admin_notifier(
    access: AccessService, users: UserService, messenger: FanoutMessenger
) -> Notify:
    """Tell every admin (PANAGER_ADMIN_IDS) something the operator must know."""

    async def notify(text: str) -> None:
        for platform, platform_id in sorted(access.admins):
            person = await users.person_id(platform, platform_id)
            user = await users.get(person) if person is not None else None
            if user is not None:
                await messenger.send(user, text)

    return notify


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


def _web_services(config: RuntimeConfig) -> tuple[WebFetcher | None, SearchProvider | None]:
    """web_fetch behind the address guard (unless turned off) and the search provider."""
    web = None
    if config.web_fetch:
        web = WebFetcher(AddressGuard(allow=AllowList.parse(config.web_fetch_allow)))
    return web, make_search(config.web_search)


async def _start_mcp(settings: Settings, config: RuntimeConfig, pool: Pool) -> McpHub | None:
    """The configured MCP servers, started (None when there are none)."""
    if not config.mcp_servers:
        return None
    hub = McpHub(config.mcp_servers, PinStore(pool), home=settings.home)
    await hub.start()
    return hub


def make_media_intake(
    pool: Pool, settings: Settings, clock: Clock, documents: DocumentService | None = None
) -> MediaIntake:
    """The attachment intake with the configured limits and transcription endpoint."""
    config = settings.runtime
    base_url, api_key = model_endpoints(settings).transcription  # or the environment's
    transcriber = Transcriber(TranscriptionConfig(
        base_url=base_url,
        api_key=api_key,
        model=settings.transcription_model,
        timeout=config.transcription_timeout_seconds,
    ))
    limits = MediaLimits(
        max_bytes=config.attachment_max_bytes,
        audio_max_seconds=config.audio_max_seconds,
        image_max_pixels=config.image_max_pixels,
        document_max_pages=config.document_max_pages,
        decode=Limits(memory_bytes=config.decode_memory_mb * 1024 * 1024,
                      timeout=config.decode_timeout_seconds, hidden=settings.home),
    )
    store = MediaStore(pool, config.media_quota_bytes)
    return MediaIntake(store, transcriber, limits, clock, documents)


def _recall(memory: MemoryService, limit: int | None) -> Recall:
    """The graph's recall: the user's memories relevant to the latest message."""

    async def recall(user: User, query: str) -> list[MemoryHit]:
        return await memory.recall(user.id, query, limit)

    return recall


def _profile_loader(profiles: ProfileService) -> Callable[[User], Awaitable[Mapping[str, str]]]:
    """The graph's profile read: the person's sections for every system prompt."""

    async def load(user: User) -> Mapping[str, str]:
        return (await profiles.get(user.id)).sections

    return load


def _thread_injector(threads: Threads) -> Callable[[User, HumanMessage], Awaitable[None]]:
    """Adds a relayed message to the recipient's thread, under their turn lock (not while
    a question to them is open: the update would drop it; they got the DM)."""

    async def inject(recipient: User, message: HumanMessage) -> None:
        await update_thread(threads, recipient, {"messages": [message]}, unless_asking=True)

    return inject


def _asking(threads: Threads) -> Callable[[User], Awaitable[bool]]:
    """Whether the user's thread waits on a question (relays to them wait meanwhile)."""

    async def asking(user: User) -> bool:
        return await thread_asking(threads, user)

    return asking


def _retrying_invoker(retries: int) -> ModelInvoker:
    async def invoke(
        model: BaseChatModel, tools: Sequence[BaseTool], messages: list[AnyMessage]
    ) -> AIMessage:
        return await invoke_with_retries(model, tools, messages, retries=retries)

    return invoke


def _streaming_invoker(config: RuntimeConfig) -> StreamInvoker | None:
    """The streamed model call (`stream: false` in the YAML turns it off)."""
    if not config.stream:
        return None
    retries = config.model_retries

    async def invoke(
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        messages: list[AnyMessage],
        sink: TextSink,
    ) -> AIMessage:
        return await stream_with_retries(model, tools, messages, sink, retries=retries)

    return invoke


def _router(
    settings: Settings, config: RuntimeConfig, pool: Pool, clock: Clock
) -> ModelRouter | None:
    """The named endpoints' models and fallbacks (None: no model configured)."""
    if not settings.model_configured:
        return None
    breakers = CircuitBreakers(
        pool, clock, failures=config.breaker_failures, cooldown=config.breaker_cooldown_seconds
    )
    return ModelRouter(
        model_endpoints(settings), breakers, retries=config.model_retries,
        retry_after_max=config.retry_after_max_seconds,
        timeout=config.model_timeout_seconds, sleep=clock.sleep,
    )


def _model_selector(
    settings: Settings, access: AccessService, router: ModelRouter | None,
    default: BaseChatModel | None,
) -> ModelSelector:
    """Per-user model override (`/model NAME`), re-checked against allowed_models and admin
    rights at every turn. A stored choice is an endpoint's name, or (from before endpoints
    had names) a model id, mapped to the endpoint serving it."""
    endpoints = model_endpoints(settings)

    def model_for(user: User) -> BaseChatModel | None:
        choice = endpoints.canonical(user.model)
        name = access.model_of(replace(user, model=choice), endpoints.default, endpoints.allowed)
        if name == endpoints.default or default is None or router is None:
            return default
        return router.model(name)

    return model_for
