"""The Google feature's wiring: the service, the link hook, and the replay after linking.

When a Google tool finds no usable link, the tools node calls `auth_hook`
(the graph's `on_auth_required`): it stores the user's message in `pending_messages` and returns
a fresh consent link. After a successful callback (in whichever process
serves it) `GoogleLinkFlow.replay_pending` prepares the thread and runs the graph again with
no new input — the user's message is already in the thread — then delivers
the answer through the messenger.

Preparing the thread: the failed Google results of the linking turn are
rewritten to say "linked now, call again" and the trailing link reply is
removed, so the model continues the original request with the full context
and results of other tools intact. If the conversation has moved on since (or
several requests are pending), a short note naming them is added instead.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)

from panager.agent.graph.config import AuthHandler
from panager.agent.graph.state import TurnContext
from panager.agent.tools.mail import MAIL_TOOL_NAMES
from panager.agent.tools.offer import GOOGLE_CONNECT, GOOGLE_TOOL_NAMES
from panager.errors import AuthRequired
from panager.providers.google.calls import GoogleAuthRequired
from panager.providers.google.service import SCOPE_NAMES, GoogleService

if TYPE_CHECKING:
    from panager.agent.turns.runner import Assistant
    from panager.services.messengers import Messenger
    from panager.services.users import User, UserService

log = logging.getLogger(__name__)

RETRY_RESULT = json.dumps(
    {"error": "Google was not linked when this ran. The user has linked it now: call again."}
)
CONNECTED_RESULT = json.dumps(
    {"error": "Google was not linked when this ran. The user has linked it now: use the "
     "Google Calendar and Tasks tools."}
)
LINKING_TOOLS = GOOGLE_TOOL_NAMES | MAIL_TOOL_NAMES | {GOOGLE_CONNECT}
REPLAY_NOTE = (
    "[Google account linked just now — this note is from Panager, not a message from the "
    "user] Please finish the request(s) that needed Google: {requests}"
)
# Every successful link is announced to the Panager user it was made for, naming the
# Google account: a link opened by someone else shows up at once.
WAITING_TEXT = (
    "✅ Google account {account} linked. I asked you a question that is still open, so "
    "I did not redo your earlier request: answer the question, then send it again."
)
LINKED_TEXT = "✅ Google account {account} linked: {scopes} are connected."
REPLAY_PREFIX = "✅ Google account {account} linked. "


def auth_hook(service: GoogleService) -> AuthHandler:
    """The graph's `on_auth_required`: keep the message for replay, hand out a link."""

    async def on_auth_required(ctx: TurnContext, auth: AuthRequired) -> str | None:
        if not isinstance(auth, GoogleAuthRequired):
            return None
        if ctx.user_text and not ctx.is_system_trigger:
            try:
                await service.add_pending(ctx.user.id, ctx.user_text)
            except Exception:
                log.exception("could not store the pending message of user %s", ctx.user.id)
        return await service.create_link(ctx.user.id, auth.scopes)

    return on_auth_required


class GoogleLinkFlow:
    """After a successful link: answer the user's pending messages and deliver the answer."""

    def __init__(
        self,
        service: GoogleService,
        users: UserService,
        assistant: Assistant,
        messenger: Messenger,
    ) -> None:
        self.service = service
        self.users = users
        self.assistant = assistant
        self.messenger = messenger

    async def replay_pending(self, user_id: int) -> bool:
        """Answer the pending messages (or say Google is connected); True when delivered."""
        user = await self.users.get(user_id)
        if user is None or user.status != "active":  # checked first: no model call for them
            return False
        account = await self.service.account(user_id)
        name = account.email if account and account.email else "(address unknown)"
        texts = await self.service.claim_pending(user_id)
        if texts and await self.assistant.pending_question(user) is not None:
            # a question is open in the thread: rewriting it would drop the question
            return await self._deliver(user, WAITING_TEXT.format(account=name))
        if not texts:
            scopes = account.scopes if account else ()
            names = [SCOPE_NAMES.get(s, s) for s in scopes] or ["nothing"]
            allowed = " and ".join([", ".join(names[:-1]), names[-1]] if names[1:] else names)
            return await self._deliver(user, LINKED_TEXT.format(account=name, scopes=allowed))
        await self.prepare_thread(user, texts)
        result = await self.assistant.run_turn(user, texts[-1], replay=True)
        prefix = REPLAY_PREFIX.format(account=name)
        return await self._deliver(user, prefix + result.text, result.link)

    async def _deliver(self, user: User, text: str, link: dict[str, str] | None = None) -> bool:
        delivered = await self.messenger.send(user, text, link=link)
        if not delivered:
            log.warning("no front end in this process could deliver to user %s", user.id)
        return delivered

    async def prepare_thread(self, user: User, texts: Sequence[str]) -> None:
        """Rewrite the linking turn so a replay with no new input finishes the request."""
        assistant = self.assistant
        config = assistant.config_for(user)
        snapshot = await assistant.graph.aget_state(config)
        messages = list((snapshot.values or {}).get("messages", []))
        prefix = self.service.link_prefix
        updates: list[BaseMessage] = [_retry(m) for m in _failed_google_results(messages, prefix)]
        last = messages[-1] if messages else None
        trailing_link = _is_google_link(last, prefix)
        if trailing_link and last is not None and last.id:
            updates.append(RemoveMessage(id=last.id))
        if not trailing_link or len(texts) > 1:
            quoted = "; ".join(json.dumps(t, ensure_ascii=False) for t in texts)
            updates.append(
                HumanMessage(
                    REPLAY_NOTE.format(requests=quoted),
                    name="panager",
                    additional_kwargs={"panager_replay": True},
                    id=str(uuid.uuid4()),
                )
            )
        await assistant.graph.aupdate_state(config, {"messages": updates}, as_node="tools")


def _is_google_link(message: AnyMessage | None, prefix: str) -> bool:
    if not isinstance(message, AIMessage):
        return False
    link = message.additional_kwargs.get("panager_link") or {}
    return str(link.get("url", "")).startswith(prefix)


def _failed_google_results(messages: Sequence[AnyMessage], prefix: str) -> list[ToolMessage]:
    """Error results of Google tools in the tool rounds that ended with a Google link."""
    found: list[ToolMessage] = []
    for index, message in enumerate(messages):
        if not _is_google_link(message, prefix):
            continue
        back = index - 1
        while back >= 0 and isinstance(result := messages[back], ToolMessage):
            if (
                result.status == "error"
                and result.name in LINKING_TOOLS
                and result.content not in (RETRY_RESULT, CONNECTED_RESULT)
            ):
                found.append(result)
            back -= 1
    return found


def _retry(result: ToolMessage) -> ToolMessage:
    return ToolMessage(
        content=CONNECTED_RESULT if result.name == GOOGLE_CONNECT else RETRY_RESULT,
        tool_call_id=result.tool_call_id,
        name=result.name,
        status="error",
        id=result.id,
    )
