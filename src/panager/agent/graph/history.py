"""What of the thread the model sees: repaired tool pairs, capped results, trimmed history.

`trim_messages(strategy="last", start_on="human")` does the trimming; starting
on a human message means a cut never separates a tool call from its result.
Two guarantees are added around it: the current user message (and this turn's
tool exchange) is never dropped — an oversized tool result is truncated
instead — and a tool call without a result (crash, cancel) gets a synthetic
error result so the API accepts the history.

Compaction's side lives here too: `keep_plan` chooses what stays after a
compaction within a token budget (the current turn whole; older messages
shortened — tool results first, then long texts, each with a marker — before
they are kept whole), and `fit_newest` cuts the newest user message in the
model input (never in the thread) only when it alone is larger than the window.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.messages.utils import count_tokens_approximately, trim_messages
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

TokenCounter = Callable[[Sequence[BaseMessage]], int]

INTERRUPTED = "Tool call interrupted before it returned a result (no result available)."
TRUNCATED_MARK = "\n…[truncated {n} characters]"
SHORTENED_MARK = "\n…[shortened when the conversation was compacted: {n:,} characters removed]"
SHORTENED_KEY = "panager_shortened"  # additional_kwargs: original length in characters
SHORT_RESULT_CHARS = 200  # an older tool result kept after a compaction
SHORT_TEXT_CHARS = 400  # an older long message kept after a compaction
NEWEST_CUT_MARK = (
    "\n…[Panager: this message is {total:,} characters, more than the model's context "
    "window holds; only the first {kept:,} are shown. Answer from this part and tell the "
    "user the rest was cut.]"
)

_SCHEMA_TOKENS: dict[tuple[str, str], int] = {}


def schema_tokens(tools: Sequence[BaseTool]) -> int:
    """Approximate tokens of the tool schemas sent with a call (4 characters a token)."""
    total = 0
    for tool in tools:
        key = (tool.name, tool.description)
        if key not in _SCHEMA_TOKENS:
            text = json.dumps(convert_to_openai_tool(tool), ensure_ascii=False)
            _SCHEMA_TOKENS[key] = len(text) // 4
        total += _SCHEMA_TOKENS[key]
    return total


def memo_counter() -> TokenCounter:
    """`count_tokens_approximately`, counting each message object once.

    The count is a sum of per-message counts, and `trim_messages` calls its
    counter on many overlapping slices (a binary search); without the memo a
    long thread is re-counted ~20 times per model call. Use one counter per
    model call: it keys on object identity.
    """
    cache: dict[int, tuple[BaseMessage, int]] = {}

    def count(messages: Sequence[BaseMessage]) -> int:
        total = 0
        for msg in messages:
            hit = cache.get(id(msg))
            if hit is None or hit[0] is not msg:
                hit = cache[id(msg)] = (msg, count_tokens_approximately([msg]))
            total += hit[1]
        return total

    return count


def dangling_tool_calls(messages: Sequence[AnyMessage]) -> list[tuple[int, ToolCall]]:
    """(index of AI message, tool call) for every call with no ToolMessage answering it."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    found: list[tuple[int, ToolCall]] = []
    for i, msg in enumerate(messages):
        if isinstance(msg, AIMessage):
            found.extend((i, call) for call in msg.tool_calls if call.get("id") not in answered)
    return found


def interrupted_result(call: ToolCall) -> ToolMessage:
    """The synthetic result that closes a dangling tool call."""
    return ToolMessage(
        content=INTERRUPTED, tool_call_id=call["id"], name=call.get("name"), status="error"
    )


def repair_tool_pairs(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """Model input with every tool call answered and no orphan tool results."""
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    out: list[AnyMessage] = []
    for msg in messages:
        if isinstance(msg, ToolMessage) and msg.tool_call_id not in calls:
            continue
        out.append(msg)
        if isinstance(msg, AIMessage):
            out.extend(interrupted_result(c) for c in msg.tool_calls if c["id"] not in answered)
    return out


def truncate_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with a marker saying how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + TRUNCATED_MARK.format(n=len(text) - limit)


def cap_tool_results(messages: Sequence[AnyMessage], limit: int) -> list[AnyMessage]:
    """Copies of tool results longer than `limit` characters, truncated (state untouched)."""
    out: list[AnyMessage] = []
    for msg in messages:
        if (
            isinstance(msg, ToolMessage)
            and isinstance(msg.content, str)
            and len(msg.content) > limit
        ):
            msg = msg.model_copy(update={"content": truncate_text(msg.content, limit)})
        out.append(msg)
    return out


def _last_human_index(messages: Sequence[AnyMessage]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return None


def trim_history(
    messages: Sequence[AnyMessage],
    max_tokens: int,
    *,
    max_tool_chars: int = 20_000,
    token_counter: TokenCounter | None = None,
) -> list[AnyMessage]:
    """The history to send: repaired, tool results capped, trimmed to `max_tokens`."""
    counter = token_counter or memo_counter()
    history = cap_tool_results(repair_tool_pairs(messages), max_tool_chars)
    # trim_messages returns a subset of the messages it is given (typed as BaseMessage).
    trimmed = cast(
        "list[AnyMessage]",
        trim_messages(
            _candidate_tail(history, max_tokens, counter),
            max_tokens=max_tokens,
            strategy="last",
            start_on="human",
            token_counter=counter,
            allow_partial=False,
        ),
    )
    last = _last_human_index(history)
    if last is None:  # system-triggered thread with no user message yet
        return trimmed or history[-1:]
    if trimmed and any(m is history[last] for m in trimmed):
        return trimmed
    return _shrink_current_turn(history[last:], max_tokens, counter)


def _candidate_tail(
    history: list[AnyMessage], max_tokens: int, counter: TokenCounter
) -> list[AnyMessage]:
    """The suffix that holds whatever `trim_messages` can keep, plus the first message over.

    Trimming it gives the same result as trimming the whole history, without
    counting messages far older than the budget can ever reach.
    """
    total = 0
    for i in range(len(history) - 1, -1, -1):
        total += counter([history[i]])
        if total > max_tokens:
            return history[i:]
    return history


def _shrink_current_turn(
    turn: list[AnyMessage], max_tokens: int, counter: TokenCounter
) -> list[AnyMessage]:
    """The current turn alone, tool results cut until it fits (the user message always stays)."""
    limit = 4_000
    while limit >= 200:
        shrunk = cap_tool_results(turn, limit)
        if counter(shrunk) <= max_tokens:
            return shrunk
        limit //= 2
    return cap_tool_results(turn, 200)


# -- what a compaction keeps -------------------------------------------------------------------


def shorten(msg: AnyMessage, *, texts: bool) -> AnyMessage:
    """A copy of `msg` (same id) cut for keeping: a tool result always, a long text if `texts`."""
    if isinstance(msg, ToolMessage):
        limit = SHORT_RESULT_CHARS
    elif texts and isinstance(msg, AIMessage | HumanMessage) and not msg.name:
        limit = SHORT_TEXT_CHARS  # named user-role notes (relays, triggers) stay whole
    else:
        return msg
    content = msg.content
    if not isinstance(content, str) or len(content) <= limit + len(SHORTENED_MARK):
        return msg
    kwargs = {**msg.additional_kwargs, SHORTENED_KEY: len(content)}
    cut = content[:limit] + SHORTENED_MARK.format(n=len(content) - limit)
    return msg.model_copy(update={"content": cut, "additional_kwargs": kwargs})


def keep_plan(
    messages: Sequence[AnyMessage], keep_tokens: int, counter: TokenCounter | None = None
) -> tuple[int, list[AnyMessage]]:
    """(index of the first message kept, shortened copies to store) for a budget in tokens.

    The current turn (from the last user message: the newest message and the tool
    pairs it needs) is always kept whole. Older turns are added newest first, each in
    the least shortened form that still fits: whole, else with its tool results
    shortened, else with its long texts shortened too; the first turn that fits in no
    form ends the kept part. The cut is always at a user message, so a tool call never
    loses its result.
    """
    count = counter or memo_counter()
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not humans:
        return 0, []
    cut = humans[-1]
    room = keep_tokens - count(messages[cut:])
    replaced: list[AnyMessage] = []
    for start in reversed(humans[:-1]):
        turn = list(messages[start:cut])
        form = _fitting_form(turn, room, count)
        if form is None:
            break
        room -= count(form)
        replaced += [new for new, old in zip(form, turn, strict=True) if new is not old]
        cut = start
    return cut, replaced


def _fitting_form(
    turn: list[AnyMessage], room: int, count: TokenCounter
) -> list[AnyMessage] | None:
    """`turn` whole, else results shortened, else texts shortened too; None if none fits."""
    results = [shorten(m, texts=False) for m in turn]
    for form in (turn, results, [shorten(m, texts=True) for m in results]):
        if count(form) <= room:
            return form
    return None


def fit_newest(
    messages: Sequence[AnyMessage], max_tokens: int, counter: TokenCounter | None = None
) -> tuple[list[AnyMessage], bool]:
    """(`messages` fitted into `max_tokens`, whether the newest user message was cut).

    For a prompt that cannot fit otherwise: tool results are capped, then older long
    texts shortened; the newest user message is cut (with a note saying so) only when
    it alone is larger than the room left. What is stored in the thread is not changed.
    """
    count = counter or memo_counter()
    last = _last_human_index(messages)
    if count(messages) <= max_tokens or last is None:
        return list(messages), False
    fitted = _shrink_current_turn(list(messages), max_tokens, count)  # every result capped
    if count(fitted) <= max_tokens:
        return fitted, False
    fitted = [shorten(m, texts=True) if i < last else m for i, m in enumerate(fitted)]
    if count(fitted) <= max_tokens:
        return fitted, False
    newest = fitted[last]
    text = newest.content if isinstance(newest.content, str) else newest.text
    others = [*fitted[:last], newest.model_copy(update={"content": ""}), *fitted[last + 1 :]]
    keep = max((max_tokens - count(others)) * 4 - len(NEWEST_CUT_MARK) - 20, 200)
    if keep >= len(text):
        return fitted, False
    note = NEWEST_CUT_MARK.format(total=len(text), kept=keep)
    fitted[last] = newest.model_copy(update={"content": text[:keep] + note})
    return fitted, True
