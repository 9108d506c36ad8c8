"""`trim_tool_results`: shrink old tool results in the checkpointed thread.

Tool results are the bulk of a long thread (a calendar listing, a search).
After each model call, results older than the `preserve_recent` newest tool
messages are cut to `max_result_length` characters with a marker, in the state
itself (same message id, so `add_messages` replaces it). The model has already
seen each result in full. Error results are never trimmed (they explain what
went wrong), and a trimmed result is flagged in its metadata so it is never
trimmed twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AnyMessage, ToolMessage

from panager.agent.graph.effects import ModelCall

TRIMMED_KEY = "panager_trimmed"  # additional_kwargs flag: original length in characters
TRIM_MARK = "\n…[older tool result trimmed: {removed:,} of {total:,} characters removed]"


def trim_old_tool_results(
    messages: Sequence[AnyMessage], *, max_length: int = 500, preserve_recent: int = 4
) -> list[ToolMessage]:
    """Trimmed copies (same ids) of the tool results that should shrink; the rest untouched."""
    results = [m for m in messages if isinstance(m, ToolMessage)]
    older = results[: max(len(results) - preserve_recent, 0)]
    return [_trimmed(m, max_length) for m in older if _trimmable(m, max_length)]


def _trimmable(msg: ToolMessage, max_length: int) -> bool:
    return (
        msg.status != "error"
        and not msg.additional_kwargs.get(TRIMMED_KEY)
        and isinstance(msg.content, str)
        and len(msg.content) > max_length
        and msg.id is not None
    )


def _trimmed(msg: ToolMessage, max_length: int) -> ToolMessage:
    text = str(msg.content)
    content = text[:max_length] + TRIM_MARK.format(
        removed=len(text) - max_length, total=len(text)
    )
    kwargs = {**msg.additional_kwargs, TRIMMED_KEY: len(text)}
    return msg.model_copy(update={"content": content, "additional_kwargs": kwargs})


class TrimToolResults:
    """After each model call, trim tool results older than the newest `preserve_recent`."""

    name = "trim_tool_results"
    params = ("max_result_length", "preserve_recent")

    def __init__(self, max_result_length: int = 500, preserve_recent: int = 4) -> None:
        if max_result_length < 50:
            raise ValueError("max_result_length must be at least 50")
        if preserve_recent < 0:
            raise ValueError("preserve_recent must be 0 or more")
        self.max_result_length = max_result_length
        self.preserve_recent = preserve_recent

    async def before_model(self, call: ModelCall) -> None:
        """Nothing before the call: the model sees fresh results in full."""

    async def after_model(self, call: ModelCall) -> None:
        """Replace old, long, non-error results in the state with trimmed copies."""
        call.replace(
            trim_old_tool_results(
                call.messages,
                max_length=self.max_result_length,
                preserve_recent=self.preserve_recent,
            )
        )
