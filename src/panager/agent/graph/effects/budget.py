"""`token_budget`: a per-user daily token cap (admins, in PANAGER_ADMIN_IDS, are exempt).

The exemption is asked of the person's identities at every model call (`exempt`, the
access service's `is_admin`), never of a person id or a stored role: a listed identity
moved away by /unlink, in this process or another, takes the exemption with it.

On by default for everyone else (`daily_token_budget`, 200,000; 0 = unlimited).

Before every model call the user's tokens for the usage day (a UTC date, so a
change of time zone cannot start a fresh day) are read from `token_usage`; at
or over the cap the turn ends with a clear refusal and no model call. Slash
commands still work; the one that calls the model, `/compact`, asks `refusal`
first. The first answer that takes the user past `warn_at` of the cap carries
a one-line notice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from panager.agent.graph.effects import ModelCall

if TYPE_CHECKING:
    from panager.services.usage import UsageService
    from panager.services.users import User

log = logging.getLogger(__name__)

REFUSAL = (
    "You have used today's token budget ({used:,} of {cap:,} tokens), so I can't answer "
    "with the model until it resets at midnight UTC ({reset:%H:%M} your time). Slash "
    "commands still work."
)
WARNING = "\n\n(Heads-up: you have used {pct}% of today's token budget — {used:,} of {cap:,}.)"


class TokenBudget:
    """Refuse model calls once a user's tokens today reach `daily_tokens`."""

    name = "token_budget"
    params = ("daily_tokens", "warn_at")

    def __init__(
        self,
        daily_tokens: int | None = None,
        warn_at: float = 0.8,
        *,
        usage: UsageService | None = None,
        exempt: Callable[[int], Awaitable[bool]] | None = None,
    ) -> None:
        if daily_tokens is None:
            raise ValueError("set daily_tokens (or daily_token_budget in the config)")
        if daily_tokens <= 0:
            raise ValueError("daily_tokens must be a positive number of tokens")
        if not 0 < warn_at <= 1:
            raise ValueError("warn_at must be in (0, 1]")
        self.daily_tokens = daily_tokens
        self.warn_at = warn_at
        self.usage = usage
        self.exempt = exempt  # person id → listed in PANAGER_ADMIN_IDS now: never capped
        self._warned: set[tuple[int, Any]] = set()  # (user id, usage day)

    async def _used(self, user: User) -> int | None:
        if self.usage is None:
            return None
        try:
            return await self.usage.today_total(user)
        except Exception:
            log.exception("could not read today's usage; not enforcing the budget")
            return None

    async def _exempt(self, user: User) -> bool:
        # An identity of the person in PANAGER_ADMIN_IDS (Discord or Telegram, joined by
        # /link or not). The terminal alone does not exempt (the budget is the operator's to
        # test).
        if self.exempt is None:
            return False
        try:
            return await self.exempt(user.id)
        except Exception:
            log.exception("could not read the person's identities; not exempt from the budget")
            return False

    async def refusal(self, user: User) -> str | None:
        """The refusal when `user` is at or over today's cap, else None."""
        if await self._exempt(user):
            return None
        used = await self._used(user)
        if used is None or used < self.daily_tokens or self.usage is None:
            return None
        reset = self.usage.resets_at().astimezone(user.zone)
        return REFUSAL.format(used=used, cap=self.daily_tokens, reset=reset)

    async def before_model(self, call: ModelCall) -> None:
        """At or over the cap: stop the turn with the refusal (no model call)."""
        refused = await self.refusal(call.user)
        if refused is not None:
            call.stop_reply = refused

    async def after_model(self, call: ModelCall) -> None:
        """Past the warning level on a final answer: append the notice, once a day."""
        response = call.response
        if response is None or response.tool_calls or await self._exempt(call.user):
            return
        used = await self._used(call.user)
        if used is None or self.usage is None or used < self.warn_at * self.daily_tokens:
            return
        key = (call.user.id, self.usage.today())
        if key in self._warned:
            return
        self._warned.add(key)
        pct = min(100, round(100 * used / self.daily_tokens))
        note = WARNING.format(pct=pct, used=used, cap=self.daily_tokens)
        call.response = response.model_copy(update={"content": response.text + note})
