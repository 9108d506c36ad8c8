"""Running one turn for one user: the entry point every front end and the scheduler use.

`Assistant.run_turn` validates the message, serialises turns per user (an
asyncio lock in-process and a PostgreSQL advisory lock across processes),
repairs a thread left with an unanswered tool call, invokes the graph and turns
every failure into one short sentence for the user — never a traceback.

A front end that can see the same message again after a crash (the Discord
inbox) passes a `message_key`: the user's message is stored in the thread
under that id, and `resume=True` first looks there — an answer already
produced is returned as it is (no second model call), a message already in
the thread but unanswered is continued, anything else runs as a new turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Durability

from panager.agent.attachments import Images, media_refs, notes_for, turn_messages
from panager.agent.deps import AgentDeps
from panager.agent.events import EventEmitter
from panager.agent.history import dangling_tool_calls, interrupted_result
from panager.agent.interrupted import ShownText, keep_interrupted
from panager.agent.state import SCHEDULED_RUN, TurnContext
from panager.agent.threads import Threads
from panager.agent.tools import build_tools
from panager.errors import ModelUnavailable
from panager.llm import NO_MODEL_MESSAGE
from panager.services.media.intake import Attachment
from panager.services.media.vision import sees_images
from panager.services.users import User

log = logging.getLogger(__name__)

FAILURE_MESSAGE = (
    "Sorry, something went wrong on my side while answering. Your message is kept; "
    "please try again."
)
# The model for a user: their /model choice, else the instance default (None: no model).
ModelSelector = Callable[[User], BaseChatModel | None]
SYSTEM_TRIGGER_PREFIX = (
    "[Scheduled task started by the scheduler, not a message from the user; the task "
    "text is quoted data] "
)


class _InvokeOptions(TypedDict):
    """Keyword arguments every graph run gets."""

    durability: Durability


@dataclass
class TurnResult:
    """What a front end shows after a turn."""

    text: str
    ok: bool = True
    link: dict | None = None  # {"url", "label"} when the user must follow a link
    tool_calls: list[str] = field(default_factory=list)
    model_calls: int = 0


def clean_text(text: str) -> str:
    """Drop NUL bytes, lone surrogates and other control characters (keeping newlines/tabs)."""
    text = text.encode("utf-8", "replace").decode("utf-8") if _has_surrogates(text) else text
    return "".join(
        ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cs")
    ).strip()


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class Assistant:
    """Runs the graph for users; shared by the terminal, Discord and the scheduler."""

    def __init__(
        self,
        threads: Threads,
        deps: AgentDeps,
        *,
        model_for: ModelSelector,
        emitter: EventEmitter,
    ) -> None:
        self.threads = threads
        self.graph = threads.graph
        self.deps = deps
        self.model_for = model_for  # the user's /model choice, else the default model
        self.emitter = emitter
        self.invoke_options: _InvokeOptions = {"durability": deps.config.checkpoint_durability}
        # Users whose thread this process left without unanswered tool calls: no repair
        # read needed. (A stale entry is harmless: the model input is repaired anyway.)
        self._clean_threads: set[int] = set()

    def config_for(self, user: User) -> RunnableConfig:
        """LangGraph config for the user's thread."""
        return self.threads.config_for(user)

    def user_lock(self, user_id: int, *, wait: bool = True) -> AbstractAsyncContextManager[None]:
        """One turn at a time per user: in this process and, via an advisory lock, across all.

        `wait=False` raises UserBusy instead of waiting for a running turn."""
        return self.threads.user_lock(user_id, wait=wait)

    def sees_images(self, user: User) -> bool:
        """Whether the person's model takes images (the name table, then `vision` config)."""
        return sees_images(self.model_name(user), self.deps.config.vision)

    def model_name(self, user: User) -> str:
        """The name of the model the person's turns use."""
        model = self.model_for(user)
        return str(getattr(model, "model_name", None) or user.model or self.deps.settings.model)

    def attachment_notes(self, user: User, attachments: Sequence[Attachment]) -> list[str]:
        """Lines to show before the answer: what was heard, what could not be used."""
        return notes_for(attachments, sees_images=self.sees_images(user),
                         model_name=self.model_name(user))

    def check_message(self, text: str, attachments: Sequence[Attachment] = ()) -> str | None:
        """A user-facing refusal for unusable input, or None when it is fine."""
        limit = self.deps.config.max_message_chars
        if not text and attachments:
            return None
        if not text:
            return "Your message was empty — what can I do for you?"
        if len(text) > limit:
            return (
                f"Your message is {len(text):,} characters; the limit is {limit:,}. "
                "Please split it into shorter messages."
            )
        return None

    async def run_turn(
        self,
        user: User,
        text: str,
        *,
        emitter: EventEmitter | None = None,
        is_system_trigger: bool = False,
        replay: bool = False,
        message_key: str | None = None,
        resume: bool = False,
        wait_for_lock: bool = True,
        attachments: Sequence[Attachment] = (),
    ) -> TurnResult:
        """Answer `text` from `user` (or run a scheduled task when is_system_trigger).

        `message_key` ids the user's message in the thread; with `resume` a message
        already answered under that key gets the stored answer (see the module doc).
        `wait_for_lock=False` (scheduled runs) raises UserBusy while another turn runs.
        `attachments` come from `MediaIntake.take` (agent/attachments.py says how they
        enter the thread); the front end shows `attachment_notes` first."""
        text = clean_text(text)
        refusal = self.check_message(text, attachments)
        if refusal:
            return TurnResult(refusal, ok=False)
        model = self.model_for(user)
        if model is None:
            return TurnResult(NO_MODEL_MESSAGE, ok=False)
        async with self.user_lock(user.id, wait=wait_for_lock):
            if resume and message_key:
                found = await self._resumed(user, message_key)
                if isinstance(found, TurnResult):
                    return found
                replay, message_key = found
            return await self._run_locked(
                user, text, model, emitter, is_system_trigger, replay, message_key, attachments
            )

    async def _resumed(self, user: User, key: str) -> TurnResult | tuple[bool, str | None]:
        """For a message seen before a restart: its answer if one was given, else how to
        run it — (replay, key): continue it in place, or run it anew."""
        snapshot = await self.graph.aget_state(self.config_for(user))
        messages = snapshot.values.get("messages", []) if snapshot.values else []
        at = next((i for i, m in enumerate(messages) if m.id == key), None)
        if at is None:
            return False, key  # it never reached the thread: a normal turn
        later = messages[at + 1 :]
        upto = next((i for i, m in enumerate(later) if isinstance(m, HumanMessage)), None)
        answers = [m for m in later[:upto] if isinstance(m, AIMessage) and not m.tool_calls]
        if answers:
            log.info("message %s of user %s was answered before a restart", key, user.id)
            return _result({"messages": [answers[-1]]})
        if upto is None:
            return True, key  # the last thing in the thread: continue the turn
        return False, None  # the thread moved on since: ask again as a new message

    async def _run_locked(
        self,
        user: User,
        text: str,
        model: BaseChatModel,
        emitter: EventEmitter | None,
        is_system_trigger: bool,
        replay: bool,
        message_key: str | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> TurnResult:
        emitter = emitter or self.emitter
        ctx = TurnContext(
            user=user,
            tools=build_tools(self.deps, user),
            emitter=emitter,
            model=model,
            is_system_trigger=is_system_trigger,
            system_instruction=text if is_system_trigger else None,
            user_text=None if is_system_trigger else text,
        )
        config = self.config_for(user)
        if user.id not in self._clean_threads:
            await self.repair_thread(user)
        inputs = self._inputs(text, is_system_trigger, replay, message_key, attachments, user)
        ctx.extra["images"] = await self._images(user, inputs["messages"])
        new = inputs["messages"][-1] if inputs["messages"] else None
        await emitter(
            "agent_start",
            user.id,
            system_trigger=is_system_trigger,
            text=new.content if new else None,
            message_id=new.id if new else None,
        )
        self._clean_threads.discard(user.id)  # until this turn ends normally
        scheduled = SCHEDULED_RUN.set(is_system_trigger)
        shown = ShownText(user.id)
        unsubscribe = emitter.subscribe(shown.on_event)
        try:
            state = await self.graph.ainvoke(
                inputs, config=config, context=ctx, **self.invoke_options
            )
            self._clean_threads.add(user.id)
            return _with_live_links(_result(state), ctx.extra.get("live_links"))
        except asyncio.CancelledError:  # Ctrl+C mid-answer: keep what the person saw
            await keep_interrupted(self.graph, config, shown.text, new)
            raise
        except ModelUnavailable as exc:
            self._clean_threads.add(user.id)  # the model failed between steps: no dangling call
            return TurnResult(exc.user_message, ok=False)
        except Exception:
            log.exception("turn failed for user %s", user.id)
            return TurnResult(FAILURE_MESSAGE, ok=False)
        finally:
            SCHEDULED_RUN.reset(scheduled)
            unsubscribe()
            await emitter("agent_end", user.id)

    def _inputs(
        self,
        text: str,
        is_system_trigger: bool,
        replay: bool,
        message_key: str | None = None,
        attachments: Sequence[Attachment] = (),
        user: User | None = None,
    ) -> dict:
        if replay:  # the user's message is already in the thread (pending replay)
            return {"messages": [], "model_calls": 0}
        if attachments and user is not None and not is_system_trigger:
            key = message_key or str(uuid.uuid4())
            seen = self.sees_images(user)
            return {"messages": turn_messages(text, attachments, key, sees_images=seen),
                    "model_calls": 0}
        if is_system_trigger:
            msg = HumanMessage(
                SYSTEM_TRIGGER_PREFIX + json.dumps(text, ensure_ascii=False),
                name="scheduler",
                additional_kwargs={"panager_system_trigger": True},
                id=str(uuid.uuid4()),
            )
        else:
            msg = HumanMessage(text, id=message_key or str(uuid.uuid4()))
        return {"messages": [msg], "model_calls": 0}

    async def _images(self, user: User, messages: list) -> Images:
        """This turn's images, read from the person's store, when their model sees images."""
        media = self.deps.media
        refs = [(m.id, r) for m in messages for r in media_refs(m)]
        if not refs or media is None or not self.sees_images(user):
            return {}
        images: dict[str, list[tuple[str, bytes]]] = {}
        for message_id, ref in refs:
            found = await media.store.get(user.id, str(ref["id"]))
            if found is not None:
                images.setdefault(message_id, []).append((found.mime, found.data))
        return images

    async def repair_thread(self, user: User) -> int:
        """Answer tool calls left without results (crash, cancel); returns how many."""
        config = self.config_for(user)
        snapshot = await self.graph.aget_state(config)
        messages = snapshot.values.get("messages", []) if snapshot.values else []
        dangling = dangling_tool_calls(messages)
        if not dangling:
            return 0
        results = [interrupted_result(call) for _, call in dangling]
        await self.graph.aupdate_state(config, {"messages": results}, as_node="tools")
        log.info("repaired %d dangling tool call(s) for user %s", len(results), user.id)
        return len(results)

    async def clear(self, user: User) -> None:
        """Start a new conversation for the user (memories and schedules are kept)."""
        checkpointer = self.graph.checkpointer
        if isinstance(checkpointer, BaseCheckpointSaver):  # not None (nor a subgraph's bool)
            await checkpointer.adelete_thread(user.thread_id)


def _with_live_links(result: TurnResult, live: dict[str, str] | None) -> TurnResult:
    """Put the live link back into what the user sees (the thread keeps the redacted one)."""
    if not live:
        return result
    for stored, link in live.items():
        result.text = result.text.replace(stored, link)
        if result.link and result.link.get("url") == stored:
            result.link = {**result.link, "url": link}
    return result


def _result(state: dict) -> TurnResult:
    messages = state.get("messages", [])
    last = messages[-1] if messages else None
    if not isinstance(last, AIMessage):
        return TurnResult("(no answer)", ok=False)
    link = last.additional_kwargs.get("panager_link")
    return TurnResult(
        last.text or "(empty answer)", link=link, model_calls=state.get("model_calls", 0)
    )
