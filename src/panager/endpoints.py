"""Named model endpoints: the environment's default, the YAML `models:`, and old keys mapped.

The environment variables (OPENAI_BASE_URL, OPENAI_API_KEY, PANAGER_MODEL,
OPENAI_API_TYPE) stay the single default endpoint, named like PANAGER_MODEL, so
an instance with no `models:` works as before. An entry under `models:` named
like PANAGER_MODEL overrides that default (keys it leaves out come from the
environment); other entries are further endpoints a person may pick with
`/model`, a `fallback:` of another, or the `background_model`.

Older keys keep working, mapped here: `allowed_models` may name model ids that
no entry declares (each becomes an endpoint on the default server, as before),
and `vision: {model: bool}` / a top-level `context_window` fill in what an
endpoint leaves unset. `deprecations` says which were used (one doctor line).
A stored `/model` choice is a model id on older instances: `resolve` maps an id
to the endpoint that serves it.

Only endpoints named in `fallback:` are ever used in place of another: a home
that keeps its mail on a local model is never failed over to a cloud API
unasked. `Endpoint.remote` says which leave the machine's network.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from panager.config import ConfigError, ModelPrice

if TYPE_CHECKING:
    from panager.config import RuntimeConfig, Settings

OPENAI_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Endpoint:
    """One model endpoint: where, which model, and what it can do."""

    name: str
    base_url: str | None  # None: OpenAI's
    model: str  # the id the server knows
    api_key: str | None = field(default=None, repr=False)
    api_type: str = "chat"
    context_window: int | None = None
    vision: bool | None = None  # None: judged from the model's name
    price: ModelPrice | None = None
    fallback: tuple[str, ...] = ()
    tools: bool = True
    key_env: str = "OPENAI_API_KEY"

    @property
    def configured(self) -> bool:
        """A key, or a server on this network that may need none."""
        return bool(self.api_key or (self.base_url and not self.remote))

    @property
    def remote(self) -> bool:
        """True when the endpoint is outside this machine and its private network."""
        host = urlsplit(self.base_url or OPENAI_URL).hostname or ""
        if host == "localhost" or host.endswith((".local", ".lan", ".internal", ".home.arpa")):
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return "." in host  # a bare name ("ollama") is a host on the local network
        return not (address.is_loopback or address.is_private or address.is_link_local)

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        """What these tokens cost at the configured price (None: no price known)."""
        if self.price is None:
            return None
        return (input_tokens * self.price.input + output_tokens * self.price.output) / 1e6


@dataclass
class Endpoints:
    """Every endpoint by name, the default's name, and who may pick which."""

    by_name: dict[str, Endpoint]
    default: str
    background: str | None = None
    deprecations: list[str] = field(default_factory=list)
    config: RuntimeConfig | None = None  # where `allowed_models` is read, at every use
    # (base_url, api key) for embeddings and transcription: the environment's unless named
    embedding: tuple[str | None, str | None] = (None, None)
    transcription: tuple[str | None, str | None] = (None, None)

    @property
    def allowed(self) -> list[str] | None:
        """The names non-admins may pick (None: only the default): `allowed_models`, read
        now, with model ids no entry declares served by the default endpoint."""
        names = self.config.allowed_models if self.config is not None else None
        if names is None:
            return None
        mapped = []
        for name in names:
            found = self.resolve(name)
            if found is None:
                found = self.by_name[name] = self._legacy_endpoint(name)
            mapped.append(found.name)
        return mapped

    def _legacy_endpoint(self, model: str) -> Endpoint:
        base = self.primary
        vision = _legacy(self.config.vision, model, model) if self.config is not None else None
        return Endpoint(model, base.base_url, model, base.api_key, base.api_type, vision=vision,
                        key_env=base.key_env)

    @classmethod
    def from_settings(cls, settings: Settings) -> Endpoints:
        """Build from the environment and the YAML config; ConfigError names what is wrong."""
        config = settings.runtime
        default = settings.model
        found: dict[str, Endpoint] = {}
        for name, spec in config.models.items():
            # The environment's key goes only to the environment's server: an entry with
            # its own base_url sends no key unless it names the variable holding one.
            own_server = spec.base_url is not None and not _same_server(
                spec.base_url, settings.openai_base_url)
            key_env = spec.api_key_env or ("" if own_server else "OPENAI_API_KEY")
            if spec.api_key_env:
                key = os.environ.get(spec.api_key_env)
            else:
                key = None if own_server else settings.openai_api_key
            model = spec.model or name
            window = spec.context_window
            if window is None and name == default:
                window = config.context_window
            vision = spec.vision if spec.vision is not None else _legacy(config.vision, name, model)
            found[name] = Endpoint(
                name, spec.base_url or settings.openai_base_url, model, key or None,
                spec.api_type or settings.api_type, window, vision, spec.price_per_mtok,
                tuple(spec.fallback), spec.tools, key_env,
            )
        if default not in found:
            found[default] = _env_endpoint(settings, default)
        endpoints = cls(found, default, deprecations=[], config=config)
        if config.vision:
            endpoints.deprecations.append("vision: {model: …} (use vision: under models:)")
        legacy = [n for n in config.allowed_models or () if endpoints.resolve(n) is None]
        if legacy:
            endpoints.deprecations.append(
                "allowed_models names model ids no entry declares ("
                + ", ".join(legacy) + "; declare them under models:)"
            )
        endpoints._check(config.background_model)
        for key in ("embedding_endpoint", "transcription_endpoint"):
            name = getattr(config, key)
            if name is not None and name not in endpoints.by_name:
                raise ConfigError(
                    f"{key} names {name!r}, which is not under models:; declare it there or "
                    f"remove {key}."
                )
        named = endpoints.by_name.get
        endpoints.embedding = _target(settings, named(config.embedding_endpoint or ""))
        endpoints.transcription = _target(
            settings, named(config.transcription_endpoint or ""), settings.transcription_base_url
        )
        return endpoints

    def _check(self, background: str | None) -> None:
        for endpoint in self.by_name.values():
            for name in endpoint.fallback:
                if name not in self.by_name:
                    raise ConfigError(
                        f"models.{endpoint.name}.fallback names {name!r}, which is not under "
                        "models:; declare it or remove it from the list."
                    )
                if name == endpoint.name:
                    raise ConfigError(f"models.{endpoint.name}.fallback names itself; remove it.")
        if background is not None:
            found = self.resolve(background)
            if found is None:
                raise ConfigError(
                    f"background_model names {background!r}, which is not under models:; "
                    "declare it there or remove background_model."
                )
            self.background = found.name

    def resolve(self, choice: str | None) -> Endpoint | None:
        """The endpoint called `choice`, else the one serving model id `choice`."""
        if not choice:
            return None
        if choice in self.by_name:
            return self.by_name[choice]
        return next((e for e in self.by_name.values() if e.model == choice), None)

    def canonical(self, choice: str | None) -> str | None:
        """A stored choice (a name, or an older instance's model id) as an endpoint name;
        unknown names are kept as they are (an admin may name any model)."""
        found = self.resolve(choice)
        return found.name if found is not None else choice

    @property
    def primary(self) -> Endpoint:
        """The default endpoint (the environment's, or the entry named like it)."""
        return self.by_name[self.default]

    def pickable(self, admin: bool) -> list[str]:
        """The names a person may pick with /model (admins: every endpoint)."""
        if admin:
            return list(self.by_name)
        return list(self.allowed) if self.allowed else [self.default]

    def chain(self, name: str) -> list[Endpoint]:
        """The endpoint and the fallbacks it names, in order (never one it does not name)."""
        first = self.by_name[name]
        rest = [self.by_name[n] for n in dict.fromkeys(first.fallback) if n != name]
        return [first, *rest]

    def for_model_id(self, model: str) -> Endpoint:
        """An admin's choice of a model id no entry declares: on the default server."""
        return self._legacy_endpoint(model)


def _env_endpoint(settings: Settings, name: str) -> Endpoint:
    """The default endpoint from the environment variables (SPEC §1)."""
    config = settings.runtime
    return Endpoint(
        name, settings.openai_base_url, settings.model, settings.openai_api_key,
        settings.api_type, config.context_window, _legacy(config.vision, name, settings.model),
    )


def _target(
    settings: Settings, named: Endpoint | None, base_url: str | None = None
) -> tuple[str | None, str | None]:
    """Where embeddings or transcription go: the named endpoint, else the environment's."""
    if named is not None:
        # "unused", not None: the OpenAI client would otherwise read OPENAI_API_KEY itself
        return named.base_url, named.api_key or ("unused" if named.base_url else None)
    return base_url or settings.openai_base_url, settings.openai_api_key


def _legacy(table: dict[str, bool], name: str, model: str) -> bool | None:
    """An older `vision: {model: bool}` answer for this endpoint, if it has one."""
    if name in table:
        return table[name]
    return table.get(model)


def _same_server(url: str, default: str | None) -> bool:
    """Whether an entry's base_url is the environment's server (OPENAI_BASE_URL or OpenAI)."""
    return url.rstrip("/") == (default or "https://api.openai.com/v1").rstrip("/")


_CACHED = "_panager_model_endpoints"  # where a Settings keeps its table, built once


def model_endpoints(settings: Settings) -> Endpoints:
    """The named model endpoints of `settings` (the environment's default first), built at
    the first use and kept on the settings object (configuration imports nothing of this
    module, so the two are no import circle)."""
    found = settings.__dict__.get(_CACHED)
    if found is None:
        found = settings.__dict__[_CACHED] = Endpoints.from_settings(settings)
    return found
