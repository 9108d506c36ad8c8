"""What a turn hands back, and what the turn's helpers need of the runner.

`TurnResult` is what every front end shows after a turn (or an Approve, a
Deny). `TurnOwner` is the part of `Assistant` (runner.py) that approvals.py
uses: the graph, a user's thread config and turn lock, and the services. Both
live here, below the runner and approvals, so neither imports the other for
its types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from panager.agent.turns.threads import ThreadOwner

if TYPE_CHECKING:
    from panager.agent.deps import AgentDeps
    from panager.agent.graph.confirm import PendingCall, Question
    from panager.services.proposals import Offer


@dataclass
class TurnResult:
    """What a front end shows after a turn."""

    text: str
    ok: bool = True
    link: dict | None = None  # {"url", "label"} when the user must follow a link
    tool_calls: list[str] = field(default_factory=list)
    model_calls: int = 0
    question: Question | None = None  # the turn stopped to ask the person (agent/graph/confirm.py)
    proposals: tuple[PendingCall, ...] = ()  # calls an unattended run held for approval
    offers: tuple[Offer, ...] = ()  # held calls offered on this answer (its buttons)
    tainted: bool = False  # the answer was written with outside content: no link previews


class TurnOwner(ThreadOwner, Protocol):
    """The graph's threads and the services (an `Assistant`)."""

    @property
    def deps(self) -> AgentDeps:
        """The services tools and commands use."""
        ...
