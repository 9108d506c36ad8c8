"""What the composition root knows of a front end: `FrontEnd`, and `Running` once started.

`cli/run.py` holds one line per front end (`FRONT_ENDS`) and nothing else that
names one: which components exist, which run by default, the checks before the
database starts, starting each, delivering without intake, and turning a
crashed front end into one line all come from these objects. Inside a
front-end package, the protocols it implements for the shared answerer are
`Conversation` (answering.py), `Surface` (streaming.py) and `Messenger`
(services/messengers.py); its name, title and inbox table are its
`panager.platforms.Platform`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from panager.app import App
    from panager.config import Settings
    from panager.platforms import Platform


@dataclass
class Running:
    """A started component: what to watch and how to stop it."""

    name: str
    stop: Callable[[], Awaitable[None]]
    task: asyncio.Task | None = None
    detail: str = ""


class FrontEnd(Protocol):
    """One way a person talks to Panager, as `panager run` starts it.

    Heavy imports (the platform's client library, the agent stack) stay inside the
    methods, so naming a front end costs nothing until it runs."""

    platform: Platform  # name ("telegram": component, identities.platform), title, inbox

    def configured(self, settings: Settings) -> bool:
        """Whether it runs by default (its token is set)."""
        ...

    def settings_problem(self, settings: Settings, *, chosen: bool) -> str | None:
        """What is wrong with its settings, as one line (never a token), or None."""
        ...

    async def check(self, settings: Settings) -> None:
        """Fail fast, before the database starts: ConfigError with one line."""
        ...

    async def start(self, app: App) -> Running:
        """Intake, answering and its messenger; ConfigError with one line when it cannot."""
        ...

    async def deliver_only(self, app: App, *, alone: bool) -> list[Running]:
        """Without its intake in this process, what still delivers to its people (`alone`:
        no other chat front end runs here)."""
        ...

    async def answer_only(self, app: App) -> list[Running]:
        """Without its intake in this process, answer the messages another process stored
        (`--components answers`: frontends/shared/workers.py); its messenger delivers too.
        Empty for a front end that stores none."""
        ...

    def explain(self, exc: BaseException) -> str | None:
        """A crash of its running task as one line for the operator, if it knows it."""
        ...
