"""`mcp_servers:` in the YAML config: one entry per MCP server the operator trusts.

```yaml
mcp_servers:
  github:
    command: npx
    args: ["-y", "@modelcontextprotocol/server-github@2025.4.8"]
    env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}"}
    users: admins            # admins (default) | all | [123456789, "telegram:42", local]
  wiki:
    url: http://localhost:9000/mcp
    headers: {Authorization: "Bearer ${WIKI_TOKEN}"}
    tools: [search, read_page]
    read_only: true
```

`${VAR}` is expanded only in `env` and `headers` (nowhere else, so a command line
cannot pick up a secret by accident); a variable that is not set stops start-up with
one line naming it. `users` names people by id in the `PANAGER_ADMIN_IDS` syntax —
never by username, which is not unique — and defaults to `admins`, because a server
usually holds the operator's credentials. `env` and `headers` never appear in a repr.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
LOCAL = "local"
# Panager's own secrets: never handed to an MCP server, by name or through ${VAR}.
PANAGER_SECRETS = frozenset({
    "OPENAI_API_KEY", "DISCORD_TOKEN", "PANAGER_SECRET_KEY", "DATABASE_URL",
    "GOOGLE_CLIENT_SECRET", "TELEGRAM_BOT_TOKEN", "PANAGER_METRICS_TOKEN",
})  # fmt: skip


class MissingVariable(ValueError):
    """A `${VAR}` in `env` or `headers` names a variable that is not set."""

    def __init__(self, variable: str, where: str) -> None:
        super().__init__(
            f"{where} uses ${{{variable}}}, but {variable} is not set; "
            f"set it in the environment (or remove it from the config)"
        )
        self.variable = variable


def expand(value: str, where: str, environ: Mapping[str, str] | None = None) -> str:
    """`value` with each `${VAR}` replaced from the environment; a missing one raises."""
    environ = os.environ if environ is None else environ

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in PANAGER_SECRETS:
            raise ValueError(f"{where} uses ${{{name}}}: Panager's own secrets are never "
                             "passed to MCP servers")
        if name not in environ:
            raise MissingVariable(name, where)
        return environ[name]

    return _VAR.sub(one, value)


def identity(entry: int | str) -> str:
    """One `users:` entry as an identity key: `discord:<id>`, `telegram:<id>` or `local`."""
    if isinstance(entry, bool):
        raise ValueError(f"{entry!r} is not a user id")
    if isinstance(entry, int):
        return f"discord:{entry}"
    text = entry.strip().lower()
    if text == LOCAL:
        return LOCAL
    kind, _, number = text.rpartition(":")
    if kind in ("", "discord", "telegram") and number.isdigit():
        return f"{kind or 'discord'}:{int(number)}"
    raise ValueError(
        f"{entry!r} is not a user id: use a Discord id (123456789), telegram:<id> or local"
    )


class McpServerConfig(BaseModel):
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    cwd: str | None = None  # default: a private directory outside PANAGER_HOME
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    users: Literal["admins", "all"] | frozenset[str] = "admins"
    tools: list[str] | None = None  # allow-list of the server's own tool names
    read_only: bool = False  # the operator vouches that no call sends or changes anything
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    max_result_chars: int = Field(default=20_000, ge=200, le=1_000_000)

    @field_validator("users", mode="before")
    @classmethod
    def _users(cls, value: Any) -> Any:
        if value in ("admins", "all"):
            return value
        if isinstance(value, int | str):
            value = [value]
        if not isinstance(value, list):
            raise ValueError("use admins, all, or a list of ids")
        return frozenset(identity(v) for v in value)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a local server) or url (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """How Panager talks to the server."""
        return "stdio" if self.command is not None else "http"

    def permits(self, identities: frozenset[str], admin: bool) -> bool:
        """Whether a person with these identities (and admin rights or not) gets this server."""
        if self.users == "all":
            return True
        if self.users == "admins":
            return admin
        return bool(self.users & identities)

    def secrets(self) -> list[str]:
        """Values of `env` and `headers` (to redact wherever server output is logged)."""
        values = [v for v in (*self.env.values(), *self.headers.values()) if len(v) >= 4]
        # "Bearer <token>": the token alone too (a server may echo it without the scheme)
        parts = [p for v in values for p in v.split() if len(p) >= 12]
        return sorted({*values, *parts}, key=len, reverse=True)


def load_servers(raw: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The raw `mcp_servers` mapping with `${VAR}` expanded in `env` and `headers`."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("mcp_servers must map server names to their settings")
    expanded: dict[str, Any] = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or not _SERVER_NAME.match(name):
            raise ValueError(
                f"server name {name!r}: use 1-32 letters, digits, '_' or '-'"
            )
        if not isinstance(spec, dict):
            raise ValueError(f"mcp_servers.{name} must be a mapping")
        spec = dict(spec)
        refused = PANAGER_SECRETS & set(spec.get("env") or {})
        if refused:
            raise ValueError(f"mcp_servers.{name}.env sets {min(refused)}: Panager's own "
                             "secrets are never passed to MCP servers")
        for key in ("env", "headers"):
            if isinstance(spec.get(key), dict):
                spec[key] = {
                    str(k): expand(str(v), f"mcp_servers.{name}.{key}.{k}", environ)
                    for k, v in spec[key].items()
                }
        expanded[name] = spec
    return expanded
