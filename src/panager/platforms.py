"""The ways a person talks to Panager, as data: names, titles, inbox tables.

Services, settings and SQL below the front ends read a front end's name
(`identities.platform`, a `/notify` choice, an inbox table, a title in a plain
sentence) without importing its package. Each front-end package describes
itself with a `Platform`; the composition root registers the front ends it runs
(`cli/run.py`, `FRONT_ENDS`), and a test front end registers its own.

The four built in stay listed here as well: settings validation, the identity
check and the scheduler read these names in processes and tests that never
import a front-end package (the terminal's `panager chat`, a worker-only
process, a service test), and they must mean the same there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """One way in: what the rest of the house knows of a front end."""

    name: str  # "telegram": identities.platform, the component name, a /notify choice
    title: str  # "Telegram": in plain sentences ("Telegram could not be reached")
    chat: bool = True  # reaches a person in a private chat: a /notify choice, a delivery route
    inbox: str | None = None  # its inbox table (a migration makes it), if it stores messages
    same_id: bool = False  # a new person's id is the platform id (kept for compatibility)

    @property
    def in_sentence(self) -> str:
        """The title inside a sentence ("the terminal", "Telegram")."""
        first, _, rest = self.title.partition(" ")
        return f"the {rest}" if first == "The" and rest else self.title


DISCORD = Platform("discord", "Discord", inbox="discord_inbox", same_id=True)
TELEGRAM = Platform("telegram", "Telegram", inbox="telegram_inbox")
TERMINAL = Platform("terminal", "The terminal", chat=False, same_id=True)
WEB = Platform("web", "The web page", chat=False)

_REGISTERED: dict[str, Platform] = {p.name: p for p in (DISCORD, TELEGRAM, TERMINAL, WEB)}


def register(platform: Platform) -> None:
    """Make a front end's name known (the same description again is a no-op)."""
    known = _REGISTERED.get(platform.name)
    if known is not None and known != platform:
        raise ValueError(f"a different front end is already named {platform.name!r}")
    _REGISTERED[platform.name] = platform


def unregister(name: str) -> None:
    """Forget a registered front end (tests only; the built-in four stay)."""
    if name not in (DISCORD.name, TELEGRAM.name, TERMINAL.name, WEB.name):
        _REGISTERED.pop(name, None)


def registered() -> tuple[Platform, ...]:
    """Every known front end, the built-in ones first."""
    return tuple(_REGISTERED.values())


def named(name: str | None) -> Platform | None:
    """The front end called `name`, if known."""
    return _REGISTERED.get(name or "")


def chat_names() -> tuple[str, ...]:
    """The chat front ends' names ("discord", "telegram", …): /notify choices, routes."""
    return tuple(p.name for p in _REGISTERED.values() if p.chat)


def identity_names() -> tuple[str, ...]:
    """Names an identity may have: the chat front ends and the terminal (the web page signs
    in as an identity of one of those)."""
    return tuple(p.name for p in _REGISTERED.values() if p.name != WEB.name)


def inbox_tables() -> tuple[str, ...]:
    """The inbox tables of the front ends that store incoming messages."""
    return tuple(p.inbox for p in _REGISTERED.values() if p.inbox)
