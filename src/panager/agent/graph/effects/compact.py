"""`compact`: keep a user's thread under the context window by shrinking the STATE itself.

Trimming only what is sent (`trim_messages`) leaves the checkpointed thread
growing forever and silently drops old context. Before a model call whose
estimated prompt is over `threshold` × the usable window, this effect:

1. trims old tool results in the state (as `trim_tool_results` does); if the
   prompt is still over, shortens the long texts before the newest user message
   in what is sent only (the thread keeps them whole, so a later summary reads
   them as they are: at a 4,096 window this spaces summaries out from one per
   4 turns to one per 5 with 2 KB tool results, BENCHMARKS.md); if still over,
2. summarises the older part with the model and REMOVES those messages from
   the checkpointed state (`RemoveMessage`), keeping the running summary in
   state (`summary`, shown in the system prompt) and the recent messages. What
   is kept is a budget in tokens, not a count: the prompt after a compaction is
   at most `target` × the usable window (well under the trigger, so the next
   turns do not compact again at once). The current turn is always kept whole;
   older kept messages are shortened (tool results first, then long texts) before
   they are kept whole (`history.keep_plan`). The cut is always at a user
   message, so a tool call never loses its result. Durable facts the summariser
   finds are saved as memories (`source="compaction"`). If the summary call
   fails, the same messages are removed and a deterministic digest (the user's
   requests) replaces the summary;
3. if the current turn alone is still over, this call's tool results are capped
   and, only when the newest message by itself is larger than the window, that
   message is cut for the model with a note (the thread keeps it whole).

The estimate counts the messages, the summary, the tool schemas offered and a
reserve for the rest of the system prompt (or the API's last count when larger).
The usable window is the smaller of the model's context window (config, else
the built-in per family) and `history_max_tokens`. `Compact.on_overflow` is the
graph's handler for a context-length refusal from the API: it compacts harder
and remembers that the model's real window is smaller than estimated.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage

from panager.agent.graph.effects import ModelCall
from panager.agent.graph.effects.summary import (
    MAX_TRANSCRIPT_CHARS,
    SUMMARY_SYSTEM,
    digest_summary,
    parse_summary,
    render_transcript,
    summary_tainted,
)
from panager.agent.graph.effects.trim import trim_old_tool_results
from panager.agent.graph.effects.windows import DEFAULT_WINDOW, context_window_for, known_window
from panager.agent.graph.history import (
    cap_tool_results,
    fit_newest,
    keep_plan,
    schema_tokens,
    shorten,
)
from panager.agent.graph.taint import is_outside
from panager.clock import Clock, SystemClock

if TYPE_CHECKING:
    from panager.services.memory.service import MemoryService
    from panager.services.usage import UsageService

log = logging.getLogger(__name__)

SYSTEM_RESERVE_TOKENS = 500  # the system prompt's own text when the graph did not measure it
NOTES_TOKENS = 60  # notes effects may add to the system prompt after it was measured
DEFAULT_BUDGET = 12_000  # usable tokens when neither the window nor a history budget is known
SUMMARY_SHARE = 0.1  # a summary is at most this share of the usable window (and summary_max_chars)


def _older_results_shortened(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """Shortened copies (same ids) of the tool results before the last user message."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
    older = [m for m in messages[:last] if isinstance(m, ToolMessage)]
    return [new for m in older if (new := shorten(m, texts=False)) is not m]


def _older_texts_shortened(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """`messages` with the long texts before the last user message shortened (same ids)."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
    return [shorten(m, texts=True) if i < last else m for i, m in enumerate(messages)]


@dataclass
class Compaction:
    """What one compaction did."""

    removed: list[AnyMessage]
    summary: str
    memories: list[str]
    fallback: bool  # True when the summary is the deterministic digest, not the model's
    shortened: list[AnyMessage]  # kept messages replaced by shortened copies (same ids)


class Compact:
    """Summarise-and-remove compaction at `threshold` of the usable window, down to `target`."""

    name = "compact"
    params = (
        "threshold",
        "target",
        "context_window",
        "keep_ratio",
        "preserve_recent",
        "max_result_length",
        "summary_max_chars",
    )

    def __init__(
        self,
        threshold: float = 0.8,
        context_window: int | None = None,
        target: float = 0.4,
        preserve_recent: int = 4,
        max_result_length: int = 500,
        summary_max_chars: int = 4_000,
        keep_ratio: float | None = None,
        *,
        history_max_tokens: int | None = None,
        usage: UsageService | None = None,
        memory: MemoryService | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not 0 < threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        if keep_ratio is not None:  # the older setting: a share of the threshold
            if not 0 < keep_ratio < 1:
                raise ValueError("keep_ratio must be in (0, 1)")
            target = threshold * keep_ratio
        if not 0 < target < threshold:
            raise ValueError("target must be above 0 and below threshold")
        if context_window is not None and context_window < 0:
            raise ValueError("context_window must be 0 (off) or a positive number of tokens")
        self.threshold = threshold
        self.target = target
        self.background_model: Any = None  # set by the app from `background_model`
        self.context_window = context_window
        self.preserve_recent = preserve_recent
        self.max_result_length = max_result_length
        self.summary_max_chars = summary_max_chars
        self.history_max_tokens = history_max_tokens
        self.usage = usage
        self.memory = memory
        self.clock = clock or SystemClock()
        self._learned: dict[str, int] = {}  # model name -> window learned from an overflow

    # -- when ------------------------------------------------------------------------------

    def window(self, call: ModelCall) -> int | None:
        """The model's context window for this call; None when unknown or disabled (0)."""
        window: int | None
        if self.context_window is not None:
            window = self.context_window
        else:
            window = known_window(call.model_name) or call.context_window or DEFAULT_WINDOW
        learned = self._learned.get(call.model_name)
        if window and learned:
            window = min(window, learned)
        return window or learned or None

    def budget(self, call: ModelCall) -> int | None:
        """Usable prompt tokens: the window, capped by the history budget."""
        window = self.window(call)
        if not window:
            return None
        return min(window, self.history_max_tokens) if self.history_max_tokens else window

    def usable_window(self, model_name: str) -> int:
        """Usable prompt tokens for `model_name` outside a call (commands)."""
        window: int | None = self.context_window or context_window_for(model_name)
        window = min(window, self._learned.get(model_name, window)) if window else None
        sizes = [x for x in (window, self.history_max_tokens) if x]
        return min(sizes) if sizes else DEFAULT_BUDGET

    def on_demand_keep(self, model_name: str) -> int:
        """Tokens of recent messages `/compact` keeps: far less than automatic compaction."""
        budget = self.usable_window(model_name)
        return max(int(budget * self.target / 4) - SYSTEM_RESERVE_TOKENS, 0)

    def summary_cap(self, budget: int | None) -> int:
        """Characters a summary may have: `summary_max_chars`, at most a tenth of the window."""
        if not budget:
            return self.summary_max_chars
        return max(min(self.summary_max_chars, int(budget * SUMMARY_SHARE * 4)), 200)

    def fixed_tokens(self, call: ModelCall) -> int:
        """The prompt around the history: system text reserve, summary and tool schemas."""
        summary = len(call.summary) // 4 if call.summary else 0
        system = SYSTEM_RESERVE_TOKENS if call.system_tokens is None else call.system_tokens
        return system + NOTES_TOKENS + summary + schema_tokens(call.turn.tools)

    def estimate(self, call: ModelCall, *, reported: bool = True) -> int:
        """Estimated prompt tokens of this call (the API's last count when larger)."""
        tokens = call.count_tokens(call.model_input) + self.fixed_tokens(call)
        if reported and call.last_input_tokens:
            tokens = max(tokens, call.last_input_tokens)
        return tokens

    async def before_model(self, call: ModelCall) -> None:
        """Over the threshold: trim old tool results; still over: summarise and remove."""
        budget = self.budget(call)
        if not budget:
            return
        limit = int(self.threshold * budget)
        if self.estimate(call) <= limit:
            return
        # Older tool results first (no model call): those before the newest few are trimmed,
        # then every one before this turn is shortened as a compaction keeps them.
        call.replace(
            trim_old_tool_results(
                call.messages,
                max_length=self.max_result_length,
                preserve_recent=self.preserve_recent,
            )
        )
        if self.estimate(call, reported=False) <= limit:
            return
        call.replace(_older_results_shortened(call.messages))
        if self.estimate(call, reported=False) <= limit:
            return
        # Older long texts shortened in what is sent only: the thread keeps them whole, so
        # the summary that comes when even this is over is made of the texts as they are.
        sent = call.model_input
        call.model_input = _older_texts_shortened(sent)
        if self.estimate(call, reported=False) <= limit:
            return
        call.model_input = sent
        # Room for the new summary at its cap, so the prompt after is at most the target.
        summary_room = self.summary_cap(budget) // 4 - len(call.summary or "") // 4
        keep = int(self.target * budget) - self.fixed_tokens(call) - summary_room
        await self.compact_call(call, keep_tokens=max(keep, 0))
        self.fit(call, limit)

    def fit(self, call: ModelCall, limit: int) -> None:
        """A turn larger than `limit` on its own: cap its results, cut the newest message."""
        room = limit - self.fixed_tokens(call)
        call.model_input, cut = fit_newest(call.model_input, room, call.count_tokens)
        if cut:
            log.info("user %s: a message larger than the window was cut", call.user.id)

    async def after_model(self, call: ModelCall) -> None:
        """Nothing after the call."""

    async def on_overflow(self, call: ModelCall, attempt: int) -> None:
        """The API said the prompt is too long: remember that, compact hard, shrink results."""
        estimate = self.estimate(call, reported=False)
        self._learned[call.model_name] = max(
            min(self._learned.get(call.model_name, estimate), int(estimate * 0.8)), 1_000
        )
        await self.compact_call(call, keep_tokens=0 if attempt > 1 else estimate // 4)
        limit = 2_000 if attempt == 1 else 500
        call.model_input = cap_tool_results(call.model_input, limit)
        budget = self.budget(call)
        if budget:
            self.fit(call, int(self.threshold * budget))

    # -- how -------------------------------------------------------------------------------

    async def compact_call(self, call: ModelCall, keep_tokens: int) -> Compaction | None:
        """Compact the thread of `call`: queue the removals, the shortened copies, the summary."""
        result = await self.compact(
            call.user,
            call.model,
            call.model_name,
            call.messages,
            call.summary,
            keep_tokens=keep_tokens,
            budget=self.budget(call),
        )
        if result is not None:
            call.replace(result.shortened)
        if result is not None and result.removed:
            call.remove(m.id for m in result.removed)
            call.state_patch.update(self.stats_patch(call.state, result))
            call.state_patch["summary_tainted"] = summary_tainted(call.state, result.removed)
        return result

    def stats_patch(self, state: dict[str, Any], result: Compaction) -> dict[str, Any]:
        """The state keys a compaction sets: the summary, how many so far, and when."""
        return {
            "summary": result.summary,
            "compactions": int(state.get("compactions") or 0) + 1,
            "last_compaction": self.clock.now().isoformat(),
        }

    async def compact(
        self,
        user: Any,
        model: Any,
        model_name: str,
        messages: Sequence[AnyMessage],
        summary: str | None,
        *,
        keep_tokens: int,
        budget: int | None = None,
    ) -> Compaction | None:
        """Summarise the messages before the kept part; None when there is nothing to do.

        When everything older fits once shortened, nothing is removed and no summary is
        made: the result carries only the shortened copies."""
        cut, shortened = keep_plan(messages, keep_tokens)
        removed = list(messages[:cut])
        if not removed:
            return Compaction([], summary or "", [], False, shortened) if shortened else None
        cap = self.summary_cap(budget)
        try:
            new_summary, memories = await self._summarise(
                user, model, model_name, summary, removed, budget
            )
            fallback = False
        except Exception as exc:
            log.warning("compaction summary failed (%s); truncating instead", type(exc).__name__)
            new_summary, memories = digest_summary(summary, removed, cap), []
            fallback = True
        if any(is_outside(m) for m in removed):
            # The summariser read outside text: whatever it calls a fact may be that text's.
            memories = []
        await self._save_memories(user, memories)
        log.info(
            "compacted thread of user %s: %d messages removed, %d shortened%s",
            user.id, len(removed), len(shortened), " (fallback)" if fallback else "",
        )
        return Compaction(removed, new_summary, memories, fallback, shortened)

    async def _summarise(
        self,
        user: Any,
        model: Any,
        model_name: str,
        previous: str | None,
        removed: Sequence[AnyMessage],
        budget: int | None,
    ) -> tuple[str, list[str]]:
        from panager.llm import invoke_with_retries
        from panager.model_router import answered_by

        if self.background_model is not None:  # `background_model`: summaries run there
            model = self.background_model
            model_name = str(getattr(model, "model_name", None) or model_name)
        if model is None:
            raise RuntimeError("no model to summarise with")
        max_chars = MAX_TRANSCRIPT_CHARS if not budget else min(MAX_TRANSCRIPT_CHARS, budget * 2)
        cap = self.summary_cap(budget)
        system = SUMMARY_SYSTEM.format(max_words=max(cap // 6, 30))
        body = (
            f"Earlier summary:\n{previous or '(none)'}\n\n"
            f"Conversation to compact:\n{render_transcript(removed, max_chars)}"
        )
        reply = await invoke_with_retries(
            model, [], [SystemMessage(system), HumanMessage(body)], retries=1
        )
        await self._record_usage(user, answered_by(reply, model_name), reply)
        return parse_summary(reply.text, cap)

    async def _record_usage(self, user: Any, model_name: str, reply: AIMessage) -> None:
        if self.usage is None or not reply.usage_metadata:
            return
        try:
            await self.usage.record(user, model_name, dict(reply.usage_metadata))
        except Exception:
            log.exception("could not record the usage of a compaction summary")

    async def _save_memories(self, user: Any, memories: list[str]) -> None:
        if self.memory is None or not memories:
            return
        try:
            await self.memory.save_many(user.id, memories, source="compaction")
        except Exception:
            log.exception("could not save memories from compaction for user %s", user.id)
