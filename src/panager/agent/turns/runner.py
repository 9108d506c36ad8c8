# Over 400 lines, kept whole: `Assistant`, the one entry of a turn (lock, open question, resume,
# invoke), read top to bottom; its input, result and approvals are already apart.
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
What the graph is handed (context, new messages, images) is built in
agent/turns/input.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command, Durability

from panager.agent.deps import AgentDeps
from panager.agent.graph.attachments import notes_for
from panager.agent.graph.confirm import (
    CHANGED,
    EXPIRED,
    NEW_MESSAGE,
    Question,
    check_answer,
    pending_question,
)
from panager.agent.graph.confirm_node import PROPOSALS_KEY
from panager.agent.graph.events import EventEmitter
from panager.agent.graph.history import dangling_tool_calls, interrupted_result
from panager.agent.graph.interrupted import RUNNING_CALL_TAINTED, ShownText, keep_interrupted
from panager.agent.graph.state import SCHEDULED_RUN, TurnContext
from panager.agent.graph.taint import marked
from panager.agent.models import pinned_for_run
from panager.agent.turns import approvals
from panager.agent.turns.input import TurnInput, build_turn, turn_context, turn_text
from panager.agent.turns.result import TurnResult
from panager.agent.turns.threads import OPEN_QUESTION, Threads
from panager.endpoints import model_endpoints
from panager.errors import ModelUnavailable, UserBusy
from panager.llm import NO_MODEL_MESSAGE
from panager.model_router import TURN_ROUTE, TurnRoute, endpoint_name
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
WAITING = (
    "A question from me is waiting for your answer (approve or deny the action I asked "
    "about); this waits until then."
)


class _InvokeOptions(TypedDict):
    """Keyword arguments every graph run gets."""

    durability: Durability


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
        self.background: BaseChatModel | None = None  # `background_model` (None: the person's)
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
        """Whether the person's model takes images (its endpoint's `vision`, else the name
        table and the older `vision` config)."""
        endpoint = model_endpoints(self.deps.settings).resolve(endpoint_name(self.model_for(user)))
        if endpoint is not None and endpoint.vision is not None:
            return endpoint.vision
        return sees_images(self.model_name(user), self.deps.config.vision)

    def background_model(self, user: User) -> BaseChatModel | None:
        """The model for background work (heartbeat checks, tidy-up, summaries)."""
        return self.background or self.model_for(user)

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
        unattended: bool | None = None,
        tainted: bool = False,
        attachments: Sequence[Attachment] = (),
        pinned_model: str | None = None,
        outside_source: str | None = None,
        on_notes: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> TurnResult:
        """Answer `text` from `user` (or run a scheduled task when is_system_trigger).

        `message_key` ids the user's message in the thread; with `resume` a message
        already answered under that key gets the stored answer (see the module doc).
        `wait_for_lock=False` (scheduled runs) raises UserBusy while another turn runs,
        or while a question to the person is open. `unattended` (default: a system
        trigger) runs no consequential call; `tainted` frames a system trigger's text
        (a schedule written while reading outside content).
        `attachments` come from `MediaIntake.take` (agent/graph/attachments.py says how they
        enter the thread); what was heard and what could not be used goes to `on_notes`
        first (the front end shows it before the answer). `outside_source`: the text is
        not the sender's own (a forwarded message) and enters framed as outside content.
        `pinned_model`: a schedule's model (its creator's), used while the person may."""
        if on_notes is not None and attachments:
            notes = self.attachment_notes(user, attachments)
            if notes:
                await on_notes(notes)
        text = turn_text(text, outside_source)
        refusal = self.check_message(text, attachments)
        if refusal:
            return TurnResult(refusal, ok=False)
        pin_note = None
        if pinned_model:
            user, pin_note = pinned_for_run(self.deps, user, pinned_model)
        model = self.model_for(user)
        if model is None:
            return TurnResult(NO_MODEL_MESSAGE, ok=False)
        async with self.user_lock(user.id, wait=wait_for_lock):
            if user.id not in self._clean_threads or await self._asked_elsewhere(user):
                asked = await self._open_question(
                    user, is_system_trigger, replay, message_key if resume else None
                )
                if asked is not None:
                    return asked
            if resume and message_key:
                found = await self._resumed(user, message_key)
                if isinstance(found, TurnResult):
                    return found
                replay, message_key = found
            if self.deps.mcp is not None:
                await self.deps.mcp.refresh()  # approvals made elsewhere count from this turn on
            if user.id not in self._clean_threads:
                await self.repair_thread(user)
            turn = await build_turn(
                self.deps, user, model, emitter or self.emitter, text,
                is_system_trigger=is_system_trigger,
                unattended=is_system_trigger if unattended is None else unattended,
                tainted=tainted, replay=replay, message_key=message_key,
                attachments=attachments, sees_images=self.sees_images,
                notes=[pin_note] if pin_note else (),
            )
            return await self._run(turn)

    async def _open_question(
        self, user: User, is_system_trigger: bool, replay: bool, resumed_key: str | None
    ) -> TurnResult | None:
        """A question left open in the thread: shown again (a resumed message), waited
        for (replays; scheduled runs raise UserBusy until it expires), or declined first
        (a new message from the person). None: go on with the turn."""
        snapshot = await self.graph.aget_state(self.config_for(user))
        question = pending_question(snapshot.interrupts)
        if question is None:
            return None
        messages = (snapshot.values or {}).get("messages", [])
        if resumed_key and any(m.id == resumed_key for m in messages):
            # the message that led to the question, seen again after a restart
            return TurnResult(approvals.shown(question), question=question, tainted=True)
        if replay:
            return TurnResult(WAITING, ok=False, question=question)
        expired = question.expired(self.deps.clock.now())
        if is_system_trigger and not expired:
            raise UserBusy(user.id)
        await approvals.decline(self, user, question, EXPIRED if expired else NEW_MESSAGE)
        return None

    async def _asked_elsewhere(self, user: User) -> bool:
        """Whether the thread waits on a question (asked by another process, perhaps)."""
        async with self.deps.pool.connection() as conn:
            row = await (await conn.execute(OPEN_QUESTION, {"t": user.thread_id})).fetchone()
        if row and row["asking"]:
            self._clean_threads.discard(user.id)
            return True
        return False

    async def pending_question(self, user: User) -> Question | None:
        """The question the user's thread waits on (None: none)."""
        snapshot = await self.graph.aget_state(self.config_for(user))
        return pending_question(snapshot.interrupts)

    async def answer(
        self,
        user: User,
        key: str,
        decisions: Mapping[str, str],
        *,
        emitter: EventEmitter | None = None,
    ) -> TurnResult:
        """Resume the turn that asked question `key` with the person's decisions
        ({call id: "approve" | "deny"}; calls not named are denied), in any process.

        The question is read from the checkpoint under the person's lock; a stale or
        foreign key or call id is refused and nothing runs. An answer after the question
        expired counts as Deny for every call."""
        model = self.model_for(user)
        if model is None:
            return TurnResult(NO_MODEL_MESSAGE, ok=False)
        async with self.user_lock(user.id):
            question = await self.pending_question(user)
            if question is None:
                return TurnResult(approvals.NO_QUESTION, ok=False)
            value = check_answer(question, key, decisions, self.deps.clock.now())
            if isinstance(value, str):
                return TurnResult(value, ok=False, question=question)
            ctx = await turn_context(self.deps, user, model, emitter or self.emitter, False, None)
            changed = await approvals.changed_since_asked(self, user, ctx, question, value)
            if changed:  # read again at the Approve: the confirm node asks again
                return await self._invoke(ctx, Command(resume={CHANGED: changed}), None)
            return await self._invoke(ctx, Command(resume=value), None)

    async def approve_proposal(
        self, user: User, proposal_id: str, on: str | None = None
    ) -> TurnResult:
        """Run exactly the call an unattended run held as `proposal_id`, once, when the
        press names where it was offered (`on`); else show its description and ask again."""
        return await approvals.approve(self, user, proposal_id, on)

    async def deny_proposal(self, user: User, proposal_id: str) -> TurnResult:
        """Refuse the held call `proposal_id` (it never runs)."""
        return await approvals.deny(self, user, proposal_id)

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

    async def _run(self, turn: TurnInput) -> TurnResult:
        """Run a new turn's graph with its input (built in one step: agent/turns/input.py)."""
        return await self._invoke(turn.context, turn.inputs, turn.new_message)

    async def _invoke(
        self, ctx: TurnContext, inputs: dict[str, Any] | Command, new: HumanMessage | None
    ) -> TurnResult:
        """Run the graph with `inputs` (a new turn, or a resume) and shape the result."""
        user, emitter = ctx.user, ctx.emitter or self.emitter
        config = self.config_for(user)
        await emitter(
            "agent_start",
            user.id,
            system_trigger=ctx.is_system_trigger,
            text=new.content if new else None,
            message_id=new.id if new else None,
        )
        self._clean_threads.discard(user.id)  # until this turn ends normally
        scheduled = SCHEDULED_RUN.set(ctx.is_system_trigger)
        route = TurnRoute()
        routed = TURN_ROUTE.set(route)  # a fallback that answered stays for the whole turn
        shown = ShownText(user.id)
        unsubscribe = emitter.subscribe(shown.on_event)
        try:
            state = await self.graph.ainvoke(
                inputs, config=config, context=ctx, **self.invoke_options
            )
            result = _result(state, ctx.extra.get(PROPOSALS_KEY, ()))
            if result.proposals:
                result.offers = await approvals.offer(self, user, state, result.proposals)
            if result.question is None:
                self._clean_threads.add(user.id)
            for note in ctx.extra.get("notes", ()):
                route.note(note)
            return _with_notes(_with_live_links(result, ctx.extra.get("live_links")), route)
        except asyncio.CancelledError:  # Ctrl+C mid-answer: keep what the person saw
            tainted = bool(ctx.extra.get(RUNNING_CALL_TAINTED))
            await keep_interrupted(self.graph, config, shown.text, new, tainted)
            raise
        except ModelUnavailable as exc:
            self._clean_threads.add(user.id)  # the model failed between steps: no dangling call
            return TurnResult(exc.user_message, ok=False)
        except Exception:
            log.exception("turn failed for user %s", user.id)
            return TurnResult(FAILURE_MESSAGE, ok=False)
        finally:
            SCHEDULED_RUN.reset(scheduled)
            TURN_ROUTE.reset(routed)
            unsubscribe()
            await emitter("agent_end", user.id)

    async def repair_thread(self, user: User) -> int:
        """Answer tool calls left without results (crash, cancel); returns how many.

        A thread waiting on a question is left alone: its open calls are the question."""
        config = self.config_for(user)
        snapshot = await self.graph.aget_state(config)
        if pending_question(snapshot.interrupts) is not None:
            return 0
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


def _with_notes(result: TurnResult, route: TurnRoute) -> TurnResult:
    """Say once, after the answer, which fallback model wrote it."""
    if route.notes:
        result.text = result.text.rstrip() + "\n\n" + " ".join(f"({n})" for n in route.notes)
    return result


def _with_live_links(result: TurnResult, live: dict[str, str] | None) -> TurnResult:
    """Put the live link back into what the user sees (the thread keeps the redacted one)."""
    if not live:
        return result
    for stored, link in live.items():
        result.text = result.text.replace(stored, link)
        if result.link and result.link.get("url") == stored:
            result.link = {**result.link, "url": link}
    return result


def _result(state: dict, proposals: Any = ()) -> TurnResult:  # Any: a list from ctx.extra
    messages = state.get("messages", [])
    last = messages[-1] if messages else None
    question = pending_question(state.get("__interrupt__") or ())
    if question is not None:
        return TurnResult(
            approvals.shown(question, last),
            question=question,
            model_calls=state.get("model_calls", 0),
            tainted=True,
        )
    if not isinstance(last, AIMessage):
        return TurnResult("(no answer)", ok=False)
    link = last.additional_kwargs.get("panager_link")
    return TurnResult(
        last.text or "(empty answer)",
        link=link,
        model_calls=state.get("model_calls", 0),
        proposals=tuple(proposals),
        tainted=marked(last),
    )
