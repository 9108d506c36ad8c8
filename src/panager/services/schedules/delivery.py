"""The delivery contract: how a scheduler worker reaches users, and how a delivery fails.

The worker (`services/schedules/worker.py`) depends only on this `Delivery`
protocol; the app's implementation is `agent/flows/delivery.py`, joined to the worker
by `App.make_worker`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from panager.services.proposals import Offer
from panager.services.schedules.types import Schedule
from panager.services.users import User


class Delivery(Protocol):
    """How a worker reaches users: the app's messenger and assistant."""

    async def send(
        self, user: User, text: str, key: str | None = None, offers: Sequence[Offer] = ()
    ) -> bool:
        """Deliver text; False when no front end can reach the user now.

        `key` is the same for every attempt at one occurrence, so a channel that can
        (Discord's message nonce) shows a re-send after a crash only once. `offers`: the
        held calls the text offers (kept with the run, so a retry carries the same)."""
        ...

    async def run_agent(
        self, user: User, instruction: str, *, tainted: bool = False, model: str | None = None
    ) -> AgentAnswer:
        """Run the graph as a system trigger in the user's thread; return the answer.

        `tainted`: the instruction was written in a model call that had read outside
        content (the run is tainted from its start). `model`: the model the schedule
        keeps (its creator's), if the person may still use it."""
        ...

    async def run_system(self, user: User, schedule: Schedule, due: datetime) -> AgentAnswer:
        """Run a system job (heartbeat, briefing, webhook call); empty text: nothing to say."""
        ...


@dataclass(frozen=True)
class AgentAnswer:
    """The result of a scheduled agent run (and the held calls its answer offers)."""

    text: str
    ok: bool = True
    offers: tuple[Offer, ...] = ()


class DeliveryFailed(Exception):
    """A delivery attempt failed; it is retried with backoff."""


class PermanentFailure(DeliveryFailed):
    """A delivery that must not be retried (e.g. the user is blocked)."""
