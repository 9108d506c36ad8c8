"""How a scheduler worker delivers: reminders through the messenger, agent tasks through a turn.

A `reminder` goes to the messenger as written (no model call); an `agent`
schedule runs `Assistant.run_turn(..., is_system_trigger=True)` in the user's
thread and the answer goes to the messenger; system jobs (heartbeat, briefing,
webhook calls) go to `agent/flows/jobs.py`. The worker itself lives in
`services/schedules/worker.py`, the `Delivery` protocol this implements in
`services/schedules/delivery.py`; `App.make_worker` joins the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panager.agent.flows.jobs import SystemJobs, answer_of
from panager.services.schedules.delivery import AgentAnswer

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from panager.agent.turns.runner import Assistant
    from panager.services.messengers import Messenger
    from panager.services.proposals import Offer
    from panager.services.schedules.types import Schedule
    from panager.services.users import User


class AssistantDelivery:
    """The worker's `Delivery`: a messenger for texts and the assistant for agent runs."""

    def __init__(self, messenger: Messenger, assistant: Assistant) -> None:
        self.messenger = messenger
        self.assistant = assistant
        self.jobs = SystemJobs(assistant)

    async def send(
        self, user: User, text: str, key: str | None = None, offers: Sequence[Offer] = ()
    ) -> bool:
        """Deliver through the messengers (terminal, Discord), with the answer's offers."""
        return await self.messenger.send(user, text, key=key, offers=offers)

    async def run_agent(
        self, user: User, instruction: str, *, tainted: bool = False, model: str | None = None
    ) -> AgentAnswer:
        """Run the graph as a system trigger; the instruction never poses as the user.

        Nobody is present: consequential calls are held as proposals, offered on the
        answer: it lists their descriptions, and its `offers` carry them as data (the
        front ends' only source of Approve/Deny buttons). A user
        whose turn is running, or who has a question open, raises UserBusy (the worker
        hands the run back instead of holding a slot while waiting). `model`: the model
        the schedule keeps, re-checked against what the person may use now."""
        result = await self.assistant.run_turn(
            user, instruction, is_system_trigger=True, wait_for_lock=False, tainted=tainted,
            pinned_model=model,
        )
        return answer_of(result)

    async def run_system(self, user: User, schedule: Schedule, due: datetime) -> AgentAnswer:
        """A system job: heartbeat, briefing or webhook call (agent/flows/jobs.py)."""
        return await self.jobs.run(user, schedule, due)

