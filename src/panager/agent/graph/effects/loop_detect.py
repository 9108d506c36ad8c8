"""`loop_detect`: stop a model that keeps calling the same tool with the same arguments.

Within one turn (since the last user message), the `max_repeats`-th identical
call (same tool, same arguments) earns one corrective note in the system
prompt before the next model call; a reply that repeats the call once more is
replaced by a polite stop (the call never runs) instead of burning the
remaining model calls.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

from panager.agent.graph.effects import ModelCall

NOTE = (
    "You have called {name} with the same arguments {n} times in this turn. Do not call it "
    "again with these arguments: use the results you already have, try something different, "
    "or answer the user now."
)
STOP = (
    "I kept repeating the same step ({name}) without getting anywhere, so I stopped. Could you "
    "rephrase what you need or give me a bit more detail?"
)
NOTED_KEY = "loop_detect_noted"


def repeated_calls(messages: Sequence[AnyMessage]) -> Counter[tuple[str, str]]:
    """How often each (tool, arguments) pair was called since the last user message."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    counts: Counter[tuple[str, str]] = Counter()
    for msg in messages[start + 1 :]:
        if isinstance(msg, AIMessage):
            for tc in msg.tool_calls:
                args = json.dumps(tc.get("args"), sort_keys=True, default=str)
                counts[(tc["name"], args)] += 1
    return counts


class LoopDetect:
    """One note at `max_repeats` identical calls in a turn; stop on the next repeat."""

    name = "loop_detect"
    params = ("max_repeats",)

    def __init__(self, max_repeats: int = 3) -> None:
        if max_repeats < 2:
            raise ValueError("max_repeats must be at least 2")
        self.max_repeats = max_repeats

    async def before_model(self, call: ModelCall) -> None:
        """After the `max_repeats`-th identical call: one corrective note to the model."""
        noted = call.turn.extra.setdefault(NOTED_KEY, set())
        for key, n in repeated_calls(call.messages).items():
            if n == self.max_repeats and key not in noted:
                noted.add(key)
                call.system_notes.append(NOTE.format(name=key[0], n=n))

    async def after_model(self, call: ModelCall) -> None:
        """A reply that would repeat a call once more is replaced by a polite stop."""
        response = call.response
        if response is None or not response.tool_calls:
            return
        counts = repeated_calls([*call.messages, response])
        looping = [name for (name, _), n in counts.items() if n > self.max_repeats]
        if looping:
            call.response = AIMessage(content=STOP.format(name=looping[0]), id=response.id)
