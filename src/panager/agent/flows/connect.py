"""OAuth connects' agent side: the link hook, and the replay after linking — for every
provider that connects by OAuth (Google today), through `AccountService.oauth_links`.

When a tool finds no usable link it raises the provider's `AuthRequired`; the tools
node calls `auth_hook` (the graph's `on_auth_required`): it stores the person's message
in `pending_messages` and returns a fresh consent link of that provider. After a
successful callback (in whichever process serves it) `LinkReplay.replay_pending`
prepares the thread and runs the graph again with no new input — the person's message
is already in the thread — then delivers the answer through the messenger.

Preparing the thread: the failed results of the linking turn are rewritten to say
"linked now, call again" and the trailing link reply is removed, so the model continues
the original request with the full context and results of other tools intact. If the
conversation has moved on since (or several requests are pending), a short note naming
them is added instead.
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

if TYPE_CHECKING:
    from panager.agent.turns.runner import Assistant
    from panager.services.accounts.oauth import OAuthLink
    from panager.services.accounts.service import AccountService
    from panager.services.messengers import Messenger
    from panager.services.users import User, UserService

log = logging.getLogger(__name__)

RETRY_TEXT = (
    "{title} was not linked when this ran. The user has linked it now: call again."
)
CONNECTED_TEXT = (
    "{title} was not linked when this ran. The user has linked it now: use the "
    "{title} Calendar and Tasks tools."
)
RETRY_RESULT = json.dumps({"error": RETRY_TEXT.format(title="Google")})
CONNECTED_RESULT = json.dumps({"error": CONNECTED_TEXT.format(title="Google")})
LINKING_TOOLS = GOOGLE_TOOL_NAMES | MAIL_TOOL_NAMES | {GOOGLE_CONNECT}
REPLAY_NOTE = (
    "[{title} account linked just now — this note is from Panager, not a message from the "
    "user] Please finish the request(s) that needed {title}: {requests}"
)
# Every successful link is announced to the Panager user it was made for, naming the
# account: a link opened by someone else shows up at once.
WAITING_TEXT = (
    "✅ {title} account {account} linked. I asked you a question that is still open, so "
    "I did not redo your earlier request: answer the question, then send it again."
)
LINKED_TEXT = "✅ {title} account {account} linked: {scopes} are connected."
REPLAY_PREFIX = "✅ {title} account {account} linked. "


def link_for(accounts: AccountService, auth: AuthRequired) -> OAuthLink | None:
    """The OAuth provider an `AuthRequired` came from (named by its name or title)."""
    return next((link for link in accounts.oauth_links()
                 if auth.provider in (link.name, link.title)), None)


def auth_hook(accounts: AccountService) -> AuthHandler:
    """The graph's `on_auth_required`: keep the message for replay, hand out a link."""

    async def on_auth_required(ctx: TurnContext, auth: AuthRequired) -> str | None:
        link = link_for(accounts, auth)
        if link is None:
            return None
        if ctx.user_text and not ctx.is_system_trigger:
            try:
                await link.pending.add(ctx.user.id, ctx.user_text)
            except Exception:
                log.exception("could not store the pending message of user %s", ctx.user.id)
        return await link.create_link(ctx.user.id, auth.scopes)

    return on_auth_required


class LinkReplay:
    """After a successful link: answer the person's pending messages and deliver the
    answer."""

    def __init__(
        self,
        accounts: AccountService,
        users: UserService,
        assistant: Assistant,
        messenger: Messenger,
    ) -> None:
        self.accounts = accounts
        self.users = users
        self.assistant = assistant
        self.messenger = messenger

    async def replay_pending(self, user_id: int, provider: str = "google") -> bool:
        """Answer the pending messages (or say the account is connected); True when
        delivered."""
        link = self.accounts.oauth_link(provider)
        user = await self.users.get(user_id)
        if link is None or user is None or user.status != "active":  # no model call then
            return False
        account = await link.linked(user_id)
        name = account.label if account and account.label else "(address unknown)"
        title = link.title
        texts = await link.pending.claim(user_id)
        if texts and await self.assistant.pending_question(user) is not None:
            # a question is open in the thread: rewriting it would drop the question
            return await self._deliver(user, WAITING_TEXT.format(title=title, account=name))
        if not texts:
            scopes = account.scopes if account else ()
            names = [link.scope_names.get(s, s) for s in scopes] or ["nothing"]
            allowed = " and ".join([", ".join(names[:-1]), names[-1]] if names[1:] else names)
            return await self._deliver(
                user, LINKED_TEXT.format(title=title, account=name, scopes=allowed))
        await self.prepare_thread(user, texts, link)
        result = await self.assistant.run_turn(user, texts[-1], replay=True)
        prefix = REPLAY_PREFIX.format(title=title, account=name)
        return await self._deliver(user, prefix + result.text, result.link)

    async def _deliver(self, user: User, text: str, link: dict[str, str] | None = None) -> bool:
        delivered = await self.messenger.send(user, text, link=link)
        if not delivered:
            log.warning("no front end in this process could deliver to user %s", user.id)
        return delivered

    async def prepare_thread(self, user: User, texts: Sequence[str], link: OAuthLink) -> None:
        """Rewrite the linking turn so a replay with no new input finishes the request."""
        assistant = self.assistant
        config = assistant.config_for(user)
        snapshot = await assistant.graph.aget_state(config)
        messages = list((snapshot.values or {}).get("messages", []))
        prefix = link.link_prefix
        updates: list[BaseMessage] = [
            _retry(m, link.title) for m in _failed_results(messages, prefix, link.title)]
        last = messages[-1] if messages else None
        trailing_link = _is_link(last, prefix)
        if trailing_link and last is not None and last.id:
            updates.append(RemoveMessage(id=last.id))
        if not trailing_link or len(texts) > 1:
            quoted = "; ".join(json.dumps(t, ensure_ascii=False) for t in texts)
            updates.append(
                HumanMessage(
                    REPLAY_NOTE.format(title=link.title, requests=quoted),
                    name="panager",
                    additional_kwargs={"panager_replay": True},
                    id=str(uuid.uuid4()),
                )
            )
        await assistant.graph.aupdate_state(config, {"messages": updates}, as_node="tools")


def _is_link(message: AnyMessage | None, prefix: str) -> bool:
    if not isinstance(message, AIMessage):
        return False
    link = message.additional_kwargs.get("panager_link") or {}
    return str(link.get("url", "")).startswith(prefix)


def _failed_results(
    messages: Sequence[AnyMessage], prefix: str, title: str
) -> list[ToolMessage]:
    """Error results of linking tools in the tool rounds that ended with a link."""
    found: list[ToolMessage] = []
    for index, message in enumerate(messages):
        if not _is_link(message, prefix):
            continue
        back = index - 1
        while back >= 0 and isinstance(result := messages[back], ToolMessage):
            if (
                result.status == "error"
                and result.name in LINKING_TOOLS
                and result.content not in _rewrites(title)
            ):
                found.append(result)
            back -= 1
    return found


def _rewrites(title: str) -> tuple[str, str]:
    """What `_retry` writes for `title` (rewritten once, never again)."""
    return (json.dumps({"error": RETRY_TEXT.format(title=title)}),
            json.dumps({"error": CONNECTED_TEXT.format(title=title)}))


def _retry(result: ToolMessage, title: str) -> ToolMessage:
    retry, connected = _rewrites(title)
    return ToolMessage(
        content=connected if result.name == GOOGLE_CONNECT else retry,
        tool_call_id=result.tool_call_id,
        name=result.name,
        status="error",
        id=result.id,
    )
