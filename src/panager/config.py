# Over 400 lines, kept whole: every setting (environment and YAML) and its validation, the one place
# a setting is defined.
"""Settings from the environment (and `.env`), plus the optional YAML runtime config.

Environment variables are the public contract (SPEC §1); `Settings` maps them
one to one. Anything that is not a secret or a deployment choice (effects,
context window, limits) lives in the YAML file named by `PANAGER_CONFIG`
(default `$PANAGER_HOME/config.yaml`). A bad value never produces a traceback:
`load_settings` raises `ConfigError` with one line naming the variable and the fix.
"""

from __future__ import annotations

import ipaddress
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from panager.mcp_config import McpServerConfig, MissingVariable, load_servers

DEFAULT_TELEGRAM_API_URL = "https://api.telegram.org"
# Anything shaped like a Telegram bot token (digits, a colon, a long key): never echoed.
BOT_TOKEN_SHAPE = re.compile(r"\d{5,}:[A-Za-z0-9_-]{20,}")
REDACTED_TOKEN = "[telegram-token]"
FRONT_END_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")  # as identities.platform is checked


class ConfigError(Exception):
    """A configuration problem, phrased as one line the user can act on."""


def _env(name: str, **kw: Any) -> Any:
    """A settings field read from exactly the environment variable `name`."""
    field = Field(validation_alias=AliasChoices(name), **kw)
    return field


def default_home() -> Path:
    """The platform's user data dir for Panager (e.g. ~/.local/share/panager)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("panager", appauthor=False))


def system_timezone() -> str:
    """The machine's IANA zone name, or UTC when it cannot be determined."""
    tz = os.environ.get("TZ", "")
    if tz and _valid_zone(tz.lstrip(":")):
        return tz.lstrip(":")
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            name = target.split("zoneinfo/", 1)[1]
            if _valid_zone(name):
                return name
    except OSError:
        pass
    return "UTC"


def _valid_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


class Settings(BaseSettings):
    """Environment configuration (SPEC §1). Field aliases are the public variable names."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    openai_api_key: str | None = _env("OPENAI_API_KEY", default=None, repr=False)
    openai_base_url: str | None = _env("OPENAI_BASE_URL", default=None)
    model: str = _env("PANAGER_MODEL", default="gpt-4o-mini")
    api_type: Literal["chat", "responses"] = _env("OPENAI_API_TYPE", default="chat")
    embedding_model: str = _env("PANAGER_EMBEDDING_MODEL", default="text-embedding-3-small")
    database_url: str | None = _env("DATABASE_URL", default=None, repr=False)
    home: Path = _env("PANAGER_HOME", default_factory=default_home)
    config_path: Path | None = _env("PANAGER_CONFIG", default=None)
    discord_token: str | None = _env("DISCORD_TOKEN", default=None, repr=False)
    access: Literal["open", "allowlist", "invite"] = _env("PANAGER_ACCESS", default="invite")
    # PANAGER_ADMIN_IDS names Discord ids ("123", "discord:123") and Telegram ids
    # ("telegram:123"); each field keeps its platform's ids.
    admin_ids: Annotated[list[int], NoDecode] = _env("PANAGER_ADMIN_IDS", default_factory=list)
    telegram_admin_ids: Annotated[list[int], NoDecode] = _env(
        "PANAGER_ADMIN_IDS", default_factory=list
    )
    # ...and every other front end's ("signal:123"), read by `admin_identities`
    admin_ids_text: str = _env("PANAGER_ADMIN_IDS", default="", repr=False)
    timezone: str = _env("PANAGER_TIMEZONE", default_factory=system_timezone)
    public_url: str = _env("PANAGER_PUBLIC_URL", default="http://localhost:8765")
    http_host: str = _env("PANAGER_HTTP_HOST", default="127.0.0.1")
    http_port: int = _env("PANAGER_HTTP_PORT", default=8765, ge=0, le=65535)
    secret_key: str | None = _env("PANAGER_SECRET_KEY", default=None, repr=False)
    metrics_token: str | None = _env("PANAGER_METRICS_TOKEN", default=None, repr=False)
    google_client_id: str | None = _env("GOOGLE_CLIENT_ID", default=None)
    google_client_secret: str | None = _env("GOOGLE_CLIENT_SECRET", default=None, repr=False)
    telegram_bot_token: str | None = _env("TELEGRAM_BOT_TOKEN", default=None, repr=False)
    telegram_api_url: str = _env("TELEGRAM_API_URL", default=DEFAULT_TELEGRAM_API_URL)
    auto_migrate: bool = _env("PANAGER_AUTO_MIGRATE", default=True)
    transcription_model: str = _env("PANAGER_TRANSCRIPTION_MODEL", default="whisper-1")
    transcription_base_url: str | None = _env("PANAGER_TRANSCRIPTION_BASE_URL", default=None)
    # a /rerank endpoint (llama.cpp, vLLM, TEI, Jina, Cohere) reordering memory search results
    rerank_base_url: str | None = _env("PANAGER_RERANK_BASE_URL", default=None)
    rerank_model: str | None = _env("PANAGER_RERANK_MODEL", default=None)
    rerank_api_key: str | None = _env("PANAGER_RERANK_API_KEY", default=None, repr=False)
    # backups against DATABASE_URL: a pg_dump as new as the server (docs/backup.md)
    pg_dump: str | None = _env("PANAGER_PG_DUMP", default=None)

    @field_validator("admin_ids", mode="before")
    @classmethod
    def _split_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _platform_ids(value, "discord")
        return value

    @field_validator("telegram_admin_ids", mode="before")
    @classmethod
    def _split_telegram_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _platform_ids(value, "telegram")
        return value

    @field_validator("timezone")
    @classmethod
    def _check_zone(cls, value: str) -> str:
        if not _valid_zone(value):
            raise ValueError(f"unknown time zone {value!r}")
        return value

    @field_validator(
        "openai_base_url", "database_url", "openai_api_key", "transcription_base_url",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("telegram_api_url", mode="before")
    @classmethod
    def _blank_is_telegram(cls, value: Any) -> Any:
        return DEFAULT_TELEGRAM_API_URL if isinstance(value, str) and not value.strip() else value

    @field_validator("telegram_api_url")
    @classmethod
    def _check_bot_api_url(cls, value: str) -> str:
        """A base URL the Bot API paths can be appended to (`<base>/bot<token>/<method>`)."""
        value = value.strip()
        if BOT_TOKEN_SHAPE.search(value):
            raise ValueError("it holds a bot token; the token belongs in TELEGRAM_BOT_TOKEN only")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("it must start with http:// or https:// and name a host")
        _ = parts.port  # raises ValueError for a port that is not a number in range
        if parts.query or parts.fragment:
            raise ValueError("a base URL has no ?query or #fragment")
        return value.rstrip("/")

    @property
    def model_configured(self) -> bool:
        """True when a chat model can be reached: a key, or a custom (local) endpoint."""
        return bool(self.openai_api_key or self.openai_base_url)

    @property
    def google_configured(self) -> bool:
        """True when both Google OAuth client values are set."""
        return bool(self.google_client_id and self.google_client_secret)

    @cached_property
    def runtime(self) -> RuntimeConfig:
        """The YAML runtime config (effects, limits), loaded once."""
        return load_runtime_config(self)

    def admin_identities(self) -> tuple[tuple[str, int], ...]:
        """Every (front end, id) PANAGER_ADMIN_IDS lists: Discord's and Telegram's fields,
        and any other front end's `name:id` (a front end added later needs no field here)."""
        listed = [("discord", i) for i in self.admin_ids]
        listed += [("telegram", i) for i in self.telegram_admin_ids]
        for part in self.admin_ids_text.replace(" ", "").split(","):
            name, _, number = part.rpartition(":")
            if name and name not in ("discord", "telegram") and number.isdigit():
                listed.append((name, int(number)))
        return tuple(dict.fromkeys(listed))


def _platform_ids(text: str, platform: str) -> list[int]:
    """The ids of `platform` in an admin list such as '123,telegram:456,discord:789'."""
    found = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        name, _, number = part.rpartition(":")
        if name and not FRONT_END_NAME.fullmatch(name):
            raise ValueError(f"{name!r} in {part!r} is not a front end's name")
        if (name or "discord") == platform:
            found.append(int(number))
        else:
            int(number)  # still checked
    return found


FIXES: dict[str, str] = {
    "PANAGER_ACCESS": "use one of: open, allowlist, invite",
    "OPENAI_API_TYPE": "use 'chat' or 'responses'",
    "PANAGER_ADMIN_IDS": (
        "use comma-separated user ids, Discord ids as they are and Telegram ids as "
        "telegram:ID (any other front end as NAME:ID), e.g. 123456789012345678,telegram:987654321"
    ),
    "PANAGER_TIMEZONE": "use an IANA zone name such as Europe/Berlin or Asia/Seoul",
    "PANAGER_HTTP_PORT": "use a port number between 0 and 65535",
    "PANAGER_AUTO_MIGRATE": "use true or false",
    "TELEGRAM_API_URL": (
        "use the Bot API server's base URL, e.g. http://localhost:8081, or leave it unset "
        "for Telegram's own (https://api.telegram.org)"
    ),
}


def load_settings(**overrides: Any) -> Settings:
    """Read and validate settings; raise ConfigError with one actionable line."""
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe_validation_error(exc)) from None
    if settings.google_configured and not settings.secret_key:
        raise ConfigError(
            "PANAGER_SECRET_KEY is not set: it is required once Google is configured "
            "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return settings


def _describe_validation_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = str(err["loc"][0]) if err.get("loc") else "?"
    name = _alias_for(loc)
    fix = FIXES.get(name, "check its value")
    value = os.environ.get(name)
    shown = (
        f" (got {BOT_TOKEN_SHAPE.sub(REDACTED_TOKEN, value)!r})"
        if value is not None and "KEY" not in name and "TOKEN" not in name
        else ""
    )
    return f"{name} is invalid{shown}: {err['msg']}; {fix}."


def _alias_for(loc: str) -> str:
    field = Settings.model_fields.get(loc)
    if field is not None and isinstance(field.validation_alias, AliasChoices):
        return str(field.validation_alias.choices[0])
    return loc.upper()


class EffectSpec(BaseModel):
    """One configured effect: `{kind: compact, params: {threshold: 0.8}}`."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)


BRAVE_SEARCH_URL = "https://api.search.brave.com/res/v1/web/search"
_HOST_ENTRY = re.compile(r"^[\w.-]{1,253}$")


class WebSearchConfig(BaseModel):
    """`web_search: {provider: searxng|brave, url, api_key_env}` — where web_search asks."""

    model_config = ConfigDict(extra="forbid")
    provider: Literal["searxng", "brave"]
    url: str | None = None  # SearXNG: the instance (required); Brave: its API by default
    api_key_env: str | None = None  # the environment variable holding the key (Brave)

    @model_validator(mode="after")
    def _complete(self) -> WebSearchConfig:
        if self.provider == "searxng" and not self.url:
            raise ValueError("searxng needs url: the instance's address, e.g. http://127.0.0.1:8888")
        if self.provider == "brave":
            self.url = self.url or BRAVE_SEARCH_URL
            self.api_key_env = self.api_key_env or "BRAVE_API_KEY"
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https:// (got {self.url[:80]!r})")
        return self


_EVERY = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_UNIT_MINUTES = {"m": 1, "h": 60, "d": 1440, "w": 10080}


class BackupConfig(BaseModel):
    """`backup: {every: 1d, keep: 14, path, passphrase_env, sessions}` — scheduled backups
    (docs/backup.md): one worker makes one every `every`, keeping the newest `keep` in `path`."""

    model_config = ConfigDict(extra="forbid")
    path: Path
    every: str = "1d"
    keep: int = Field(default=14, ge=1, le=1000)
    passphrase_env: str | None = None  # the variable holding a passphrase (else the secret key)
    sessions: bool = True  # the per-person session recordings too

    @field_validator("every")
    @classmethod
    def _every(cls, value: str) -> str:
        found = _EVERY.match(str(value))
        if not found:
            raise ValueError(f"{value!r} is not a duration such as 30m, 12h, 1d or 1w")
        if int(found.group(1)) * _UNIT_MINUTES[found.group(2)] < 10:
            raise ValueError("backups run every 10 minutes at the most often")
        return value

    @property
    def interval_minutes(self) -> int:
        """`every` in minutes."""
        found = _EVERY.match(self.every)
        assert found is not None  # checked on load
        return int(found.group(1)) * _UNIT_MINUTES[found.group(2)]


class ModelPrice(BaseModel):
    """`price_per_mtok: {input, output}` — what a million tokens cost (any currency)."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)


class ModelSpec(BaseModel):
    """One named model endpoint under `models:` (docs/models.md). Every key is optional
    for the entry named like PANAGER_MODEL: what it leaves out comes from the environment."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = None  # None: the environment's OPENAI_BASE_URL (or OpenAI's)
    api_key_env: str | None = None  # the variable holding its key; None: OPENAI_API_KEY
    model: str | None = None  # the id the server knows; None: the entry's name
    api_type: Literal["chat", "responses"] | None = None
    context_window: int | None = Field(default=None, ge=0)
    vision: bool | None = None
    price_per_mtok: ModelPrice | None = None
    fallback: list[str] = Field(default_factory=list)  # names tried in order when it fails
    tools: bool = True  # false: a server that rejects `tools` (it answers without acting)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (got {value[:80]!r})")
        return value


class RuntimeConfig(BaseModel):
    """YAML runtime configuration (`PANAGER_CONFIG`); every key optional."""

    model_config = ConfigDict(extra="forbid")

    effects: list[EffectSpec] | None = None
    context_window: int | None = None  # None: built-in default per model family; 0 disables
    max_iterations: int = Field(default=10, ge=1, le=100)
    history_max_tokens: int = Field(default=12_000, ge=500)
    max_message_chars: int = Field(default=8_000, ge=100)
    max_tool_result_chars: int = Field(default=20_000, ge=200)
    memory_dedupe_threshold: float = Field(default=0.95, ge=0.0, le=1.0)  # related memories
    memory_recall_threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    # None: the learned gate's own limit (or 2 with a bar); measured: docs/memory.md
    memory_inject_limit: int | None = Field(default=None, ge=0, le=50)
    memory_tidy: bool = True  # the nightly tidy-up of memories (a system job per person)
    memory_tidy_at: str = "03:00"  # local time of the tidy-up
    memory_tidy_tokens: int = Field(default=20_000, ge=0)  # model tokens per night, at most
    schedule_grace_seconds: int = Field(default=3600, ge=0)
    scheduler_poll_seconds: float = Field(default=5.0, gt=0)
    # How long a claim outlives a process that died holding it: a reminder being delivered
    # (scheduler) or a Discord message being answered (inbox) is taken up again after this.
    scheduler_lease_seconds: float = Field(default=60.0, ge=1)
    inbox_lease_seconds: float = Field(default=90.0, ge=1)
    # False: the process receiving Discord or Telegram messages only stores them, and
    # `panager run --components answers` processes answer them (docs/deploy.md).
    receiver_answers: bool = True
    # Messages one answer worker (`--components answers`) answers at once (0: no cap); the
    # rest wait unclaimed for a worker with room, so workers share a burst instead of the
    # first one taking it all. A receiver that answers is not capped.
    inbox_max_active: int = Field(default=24, ge=0)
    allow_user_messages: bool = False
    # How long an action a run with nobody present held waits for the person's Approve.
    proposal_expiry_hours: float = Field(default=24.0, gt=0)
    skills: bool = True
    # Tokens a non-admin may use per local day (the token_budget effect); 0 = unlimited.
    daily_token_budget: int = Field(default=200_000, ge=0)
    # Tokens the runs of one webhook may use per UTC day, admins' hooks too; 0 = unlimited.
    webhook_daily_tokens: int = Field(default=50_000, ge=0)
    # Models non-admins may pick with /model; None = only the configured PANAGER_MODEL.
    allowed_models: list[str] | None = None
    # Fair scheduling (docs/scheduler.md): shortest repeat interval per kind, active
    # schedules per user, runs of one user in flight at once per worker.
    schedule_min_interval_agent_minutes: int = Field(default=15, ge=0)
    schedule_min_interval_reminder_minutes: int = Field(default=1, ge=0)
    schedule_max_active_per_user: int = Field(default=100, ge=1)
    scheduler_user_in_flight: int = Field(default=2, ge=1)
    # /save: saved conversations per user, and their total size.
    saved_sessions_max: int = Field(default=50, ge=1)
    saved_sessions_max_bytes: int = Field(default=20_000_000, ge=10_000)
    checkpoint_pruning: bool = True
    # When a turn's checkpoints are written: "exit" (once, at the end of the turn — also on
    # errors and cancellation), "async" (after every step, in the background) or "sync".
    checkpoint_durability: Literal["exit", "async", "sync"] = "exit"
    model_retries: int = Field(default=3, ge=0, le=10)
    # Named model endpoints, what background work runs on, and the fallback policy
    # (docs/models.md): a Retry-After up to this long is waited for when a fallback is
    # named, a longer one moves on at once; an endpoint failing this many calls in a row
    # is skipped for the cool-down (the circuit breaker, kept in PostgreSQL).
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    background_model: str | None = None
    # Embeddings and transcription use the environment's endpoint unless one is named here
    # (its base_url and key; the models stay PANAGER_EMBEDDING_MODEL / _TRANSCRIPTION_MODEL).
    embedding_endpoint: str | None = None
    transcription_endpoint: str | None = None
    retry_after_max_seconds: float = Field(default=10.0, ge=0)
    breaker_failures: int = Field(default=3, ge=1)
    breaker_cooldown_seconds: float = Field(default=60.0, gt=0)
    model_timeout_seconds: float = Field(default=120.0, gt=0)
    stream: bool = True  # stream answers as they are written (false: one piece at the end)
    # web_fetch (on by default) reaches public addresses only; these hosts, addresses or
    # CIDR networks are reachable too (e.g. a home server). web_search needs a provider.
    web_fetch: bool = True
    web_fetch_allow: list[str] = Field(default_factory=list)
    web_search: WebSearchConfig | None = None
    backup: BackupConfig | None = None  # scheduled backups (docs/backup.md)

    @field_validator("web_fetch_allow")
    @classmethod
    def _allow_entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            text = str(entry).strip().strip("[]")
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                if not _HOST_ENTRY.match(text):
                    raise ValueError(
                        f"{entry!r} is not a host name, IP address or CIDR network"
                    ) from None
        return entries

    # MCP servers the operator trusts (panager.mcp_config; docs/tools.md, "MCP servers").
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    # More MCP tools than this for one person: offer `tool_search` instead (null: never).
    mcp_tool_search_above: int | None = Field(default=20, ge=0)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _expand_mcp(cls, value: Any) -> Any:
        return load_servers(value)

    # Attachments (docs/attachments.md): size, audio length, decoded pixels, document pages,
    # the per-person store, the decoder's limits, transcription time, and which models see.
    attachment_max_bytes: int = Field(default=10_000_000, ge=1_000)
    audio_max_seconds: float = Field(default=600.0, gt=0)
    image_max_pixels: int = Field(default=40_000_000, ge=10_000)
    document_max_pages: int = Field(default=300, ge=1)
    media_quota_bytes: int = Field(default=200_000_000, ge=1_000_000)
    document_quota_bytes: int = Field(default=200_000_000, ge=100_000)
    decode_memory_mb: int = Field(default=1024, ge=128)
    decode_timeout_seconds: float = Field(default=30.0, gt=0)
    transcription_timeout_seconds: float = Field(default=60.0, gt=0)
    vision: dict[str, bool] = Field(default_factory=dict)  # model name -> sees images
    # Discord attachments are downloaded only from these hosts (its CDN).
    discord_cdn_hosts: list[str] = Field(
        default_factory=lambda: ["cdn.discordapp.com", "media.discordapp.net"]
    )
    # Telegram: receive updates by webhook on the web component (needs an https
    # PANAGER_PUBLIC_URL) instead of long polling.
    telegram_webhook: bool = False
    telegram_poll_seconds: int = Field(default=25, ge=1, le=50)  # getUpdates long-poll timeout


def load_runtime_config(settings: Settings) -> RuntimeConfig:
    """Load the YAML runtime config; a missing default file means all defaults."""
    path = settings.config_path
    explicit = path is not None
    if path is None:
        path = settings.home / "config.yaml"
    if not path.exists():
        if explicit:
            raise ConfigError(
                f"PANAGER_CONFIG points at {path}, which does not exist; fix the path."
            )
        return RuntimeConfig()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return RuntimeConfig.model_validate(data)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{path} is not valid YAML ({exc.__class__.__name__}); fix the file."
        ) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        missing = (err.get("ctx") or {}).get("error")
        if isinstance(missing, MissingVariable):
            raise ConfigError(f"{path}: {missing}.") from None
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{path}: '{where}' is invalid: {err['msg']}.") from None
