"""Joining front ends into one person: claims, the issuing side's Approve, the join, /unlink.

The code and claim rules live in services/linking.py and the data rules in
services/joining.py; this module puts them in order:

1. `claim` — the code's other side says "this is me too". Refused when it would
   join an admin's account into someone else's (an admin joins only from a code
   the admin made, so being talked into typing a code cannot hand an admin's
   rights away). The claimant is told in plain words whose account that is (front
   end, username, display name) and what joining gives it; nothing joins yet.
2. `confirm` — the claimant agrees (`/link confirm`, or `/link cancel`), before the
   code expires. Until then their data stays theirs whatever the issuer does.
3. `approve` — the issuing person agrees (only after the claimant confirmed). With
   two Google accounts the person first picks one (the other is disconnected and
   revoked at Google). Then,
   under both people's turn locks (ascending ids, so two joins cannot deadlock),
   the conversation not kept is saved as memories marked `link`, and one
   transaction moves everything (services/joining.py) after checking that the
   identities still belong to the people the request named.
4. `unlink` — the current identity leaves for a new, empty person.

The issuing person survives (their id, their settings); the thread that
survives is the one written to last. Admin rights follow the person: admin if
any joined identity is in PANAGER_ADMIN_IDS (the terminal counts as listed: it
is the machine's owner).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

from panager.agent.graph.taint import is_outside, marked
from panager.agent.graph.tool import shown_text
from panager.services.joining import (
    JoinError,
    JoinPlan,
    count_identities,
    detach_identity,
    join_people,
    lock_people,
    person_of,
    set_role,
    thread_activity,
)
from panager.services.linking import LinkRefused, LinkRequest, LinkService, platform_label

if TYPE_CHECKING:
    from panager.agent.turns.runner import Assistant
    from panager.services.users import User

log = logging.getLogger(__name__)

Identity = tuple[str, int]
SUMMARY_TURNS = 40  # messages of a dropped conversation kept in its summary
SUMMARY_CATEGORY = "conversation"
CHUNK_CHARS = 1_200  # a memory per few exchanges: small enough to be recalled on its own


class Linking:
    """The link, approve and unlink steps for one assistant (see the module doc)."""

    def __init__(self, assistant: Assistant) -> None:
        self.assistant = assistant
        self.deps = assistant.deps
        self.links = LinkService(self.deps.pool, self.deps.clock)

    def listed(self, identities: list[Identity]) -> bool:
        """True when one of these identities carries admin rights."""
        return any(self.deps.access.carries_rights(i) for i in identities)

    async def issue(self, user: User, identity: Identity) -> str:
        """A code for the person behind `identity`, with how to use it."""
        code = await self.links.issue(user.id, *identity)
        here = platform_label(identity[0])
        return (
            f"Your link code: {code}\n"
            f"Send /link {code} from the other front end (Discord, Telegram or the terminal) "
            f"within 10 minutes. Nothing is joined until you approve it here in {here}. "
            "Never type a code someone else gave you: it would join your account into theirs."
        )

    async def claim(self, user: User, identity: Identity, code: str) -> str:
        """Claim `code` for this identity; the issuing person must still approve."""
        if user.status == "blocked":
            return "Sorry, you don't have access to this assistant."
        request = await self.links.claim(code, *identity)  # raises LinkRefused
        issuer = await self.deps.users.get(request.issuer)
        issuer_ids = await self.deps.users.identities(request.issuer)
        mine = await self.deps.users.identities(user.id)
        if issuer is None or issuer.status == "blocked":
            await self.links.settle(request, "denied")
            raise LinkRefused("That code can't be used any more.")
        if self.listed(mine) and not self.listed(issuer_ids):
            await self.links.settle(request, "denied")
            raise LinkRefused(
                "This account has admin rights, so it only joins from a code made by this "
                "account: send /link here and type that code in the other front end."
            )
        # The name is the claimant's own choice: shown quoted, invisible characters visible.
        who = f"The {platform_label(identity[0])} account {shown_text(user.username, 80)}"
        await self._tell(
            issuer,
            f"{who} used your link code and asks to become one person with you. Once it "
            "confirms, send /link approve if that was you; if not, send /link deny "
            "(nothing is joined until both of you agree).",
        )
        return (
            f"Code accepted. {account_words(request, issuer)} one person: whoever uses that "
            "account will read your memories, documents, mail and calendar. Only continue if "
            f"that account is yours: send /link confirm here before "
            f"{request.expires_at:%H:%M} UTC, or /link cancel. Nothing is joined until you "
            f"confirm and it approves in {platform_label(request.platform)}."
        )

    async def confirm(self, user: User, identity: Identity) -> str:
        """The claimant agrees to become one person with the code's issuer."""
        request = await self.links.claimed_by(*identity)
        if request is None or (confirmed := await self.links.confirm(request)) is None:
            return "Nothing is waiting for your confirmation (a code lasts 10 minutes)."
        issuer = await self.deps.users.get(confirmed.issuer)
        if issuer is not None:
            who = f"The {platform_label(identity[0])} account {shown_text(user.username, 80)}"
            await self._tell(
                issuer,
                f"{who} confirmed it wants to become one person with you. If that was you, "
                f"send /link approve before {confirmed.expires_at:%H:%M} UTC; if not, send "
                "/link deny.",
            )
        return (
            f"Confirmed. Now approve it in {platform_label(confirmed.platform)}, where the code "
            f"was made: send /link approve there before {confirmed.expires_at:%H:%M} UTC."
        )

    async def cancel(self, identity: Identity) -> str:
        """The claimant withdraws their claim."""
        request = await self.links.claimed_by(*identity)
        if request is None or not await self.links.settle(request, "denied"):
            return "Nothing is waiting for your confirmation."
        return "Cancelled: nothing was joined."

    async def _tell(self, person: User, text: str) -> None:
        try:
            await self.deps.messenger.send(person, text)
        except Exception:  # the request is still waiting in /link; a failed notice loses nothing
            log.warning("could not tell person %s about a link request", person.id, exc_info=True)

    async def deny(self, user: User) -> str:
        """Refuse the claim waiting for this person."""
        request = await self.links.pending(user.id)
        if request is None or not await self.links.settle(request, "denied"):
            return "Nothing is waiting for your approval."
        return (
            f"Denied: the {platform_label(request.claimed_platform)} account that used your code "
            "was not joined. Send /link for a new code when you want one."
        )

    async def approve(self, user: User, choice: str = "") -> str:
        """Join the claimant into this person (asking first which Google account to keep)."""
        request = await self.links.pending(user.id)
        if request is None:
            return "Nothing is waiting for your approval. Send /link to get a code."
        if not request.confirmed:
            return (
                f"The {platform_label(request.claimed_platform)} account that used your code has "
                f"not confirmed yet: it must send /link confirm there before "
                f"{request.expires_at:%H:%M} UTC. Then send /link approve again."
            )
        question = await self._account_choice(request, choice)
        if question is not None:
            return question
        try:
            await self.join(request)
        except JoinError as exc:
            return f"Nothing was joined: {exc}. Send /link for a new code and try again."
        names = ", ".join(
            platform_label(p) for p, _ in await self.deps.users.identities(request.issuer)
        )
        return (
            f"Joined. You are one person on {names}: memories, schedules, documents and usage "
            "are shared. /notify says where reminders go; /unlink detaches a front end."
        )

    async def _account_choice(self, request: LinkRequest, choice: str) -> str | None:
        """None when each OAuth provider (at most one account per person, e.g. Google)
        keeps at most one account; else the question to ask."""
        accounts = self.deps.accounts
        for link in accounts.oauth_links() if accounts is not None else []:
            mine = await link.linked(request.issuer)
            theirs = await link.linked(request.claimant)
            if mine is None or theirs is None:
                continue
            options = {"1": (request.claimant, mine), "2": (request.issuer, theirs)}
            picked = choice.strip().lower()
            dropped = next((drop for key, (drop, kept) in options.items()
                            if picked in (key, (kept.label or "").lower())), None)
            if dropped is not None:
                await link.disconnect(dropped)
                continue
            other = platform_label(request.claimed_platform)
            return (
                f"Both of you have a {link.title} account linked; the joined person keeps "
                f"one:\n  1. {mine.label or 'unknown address'} (linked here)\n"
                f"  2. {theirs.label or 'unknown address'} (linked on {other})\n"
                "Send /link approve 1 or /link approve 2. The other is disconnected and its "
                f"access revoked at {link.title}."
            )
        return None

    async def join(self, request: LinkRequest) -> None:
        """Join the claimant's person into the issuer's, under both turn locks."""
        keep, gone = request.issuer, request.claimant
        async with AsyncExitStack() as stack:
            for person in sorted((keep, gone)):
                await stack.enter_async_context(self.assistant.user_lock(person))
            keep_thread = await self._save_dropped_thread(keep, gone)
            identities = [
                *await self.deps.users.identities(keep),
                *await self.deps.users.identities(gone),
            ]
            plan = JoinPlan(keep, gone, keep_thread, admin=self.listed(identities))
            async with self.deps.pool.connection() as conn, conn.transaction():
                await lock_people(conn, keep, gone)
                issuer = await person_of(conn, request.platform, request.platform_id)
                claimant = await person_of(
                    conn, request.claimed_platform, request.claimed_platform_id
                )
                if (issuer, claimant) != (keep, gone):
                    raise JoinError("one of the two front ends changed person meanwhile")
                await join_people(conn, plan)
        log.info("joined person %s into %s", gone, keep)

    async def _save_dropped_thread(self, keep: int, gone: int) -> int:
        """Which thread survives (the one written last); the other is saved as memories."""
        activity = await thread_activity(self.deps.pool, keep, gone)
        if not activity:
            return keep
        kept = max(activity, key=lambda person: activity[person])
        dropped = gone if kept == keep else keep
        if dropped in activity:
            await self._summarise(dropped)
        return kept

    async def _summarise(self, person: int) -> None:
        memory = self.deps.memory
        user = await self.deps.users.get(person)
        if memory is None or user is None:
            return
        snapshot = await self.assistant.graph.aget_state(self.assistant.config_for(user))
        messages = list((snapshot.values or {}).get("messages", []))
        where = ", ".join(platform_label(p) for p, _ in await self.deps.users.identities(person))
        until = (snapshot.created_at or "")[:10]
        # Outside content in the conversation (a relayed message, a web page…) may have
        # shaped its answers: the summary carries the mark on, like any memory written then.
        tainted = any(marked(m) or is_outside(m) for m in messages)
        for chunk in summary_chunks(messages, where, until):
            await memory.save(person, chunk, SUMMARY_CATEGORY, source="link", tainted=tainted)

    async def unlink(self, user: User, identity: Identity) -> str:
        """Move this identity to a new, empty person (the joined data stays)."""
        async with (
            self.assistant.user_lock(user.id),
            self.deps.pool.connection() as conn,
            conn.transaction(),
        ):
            await lock_people(conn, user.id)
            if await person_of(conn, *identity) != user.id:
                return "This front end is not joined to anyone."
            if await count_identities(conn, user.id) < 2:
                return "Nothing to unlink: this is your only front end."
            # Let in only as this front end alone would be at its first message: joining
            # is not a way past `invite`/`allowlist`.
            admitted = self.listed([identity]) or self.deps.access.mode == "open"
            new = await detach_identity(
                conn, user.id, *identity, user.username, admin=self.listed([identity]),
                admitted=admitted,
            )
        rest = await self.deps.users.identities(user.id)
        async with self.deps.pool.connection() as conn:
            await set_role(conn, user.id, self.listed(rest))
        log.info("identity %s:%s detached from person %s into %s", *identity, user.id, new)
        names = ", ".join(platform_label(p) for p, _ in rest)
        waits = "" if admitted else (
            " Like anyone new here, it needs an invite or an admin's allow before it can talk "
            "to Panager."
        )
        return (
            f"Unlinked. {platform_label(identity[0])} starts as a new, empty person from your "
            f"next message; your memories, schedules and conversation stay on {names}.{waits}"
        )


def account_words(request: LinkRequest, issuer: User) -> str:
    """'This makes you and the Telegram account "mallory" ("Mallory M.")' — the issuing
    account in the owner's own words (quoted, invisible characters made visible)."""
    name = f" ({shown_text(issuer.display_name, 80)})" if issuer.display_name else ""
    return (
        f"This makes you and the {platform_label(request.platform)} account "
        f"{shown_text(issuer.username, 80)}{name}"
    )


def summary_chunks(messages: list[AnyMessage], where: str, until: str) -> list[str]:
    """A dropped conversation as memory texts: who said what, the latest turns, in order."""
    lines = []
    for message in messages[-SUMMARY_TURNS:]:
        text = message.content if isinstance(message.content, str) else ""
        text = " ".join(text.split())
        if not text:
            continue
        if isinstance(message, HumanMessage):
            lines.append(f"I said: {text}")
        elif isinstance(message, AIMessage) and not message.tool_calls:
            lines.append(f"Panager answered: {text}")
    head = f"From the conversation on {where} (until {until}), kept when two accounts joined:"
    chunks: list[str] = []
    current = head
    for line in lines:
        line = line[: CHUNK_CHARS - len(head) - 2]
        if len(current) + 1 + len(line) > CHUNK_CHARS:
            chunks.append(current)
            current = head
        current += "\n" + line
    if current != head:
        chunks.append(current)
    return chunks
