"""The person's connected accounts across every provider, read once per turn.

`AccountService` holds the registered providers (`panager.app.PROVIDERS`, in
that order; Google first, so `"primary"` is Google's primary calendar until
the person picks another default on the Connections page) and answers two
questions: what can this person do (`connected` — one trip per provider, which
`tools_for_turn` asks once), and which `Calendar`/`Tasks` serve a call
(`calendars`, `tasks`, `calendar_for`), raising the provider's own "connect first"
when none does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from panager.services.accounts.provider import (
    GOOGLE,
    Account,
    Calendar,
    Capability,
    FormConnect,
    Mailbox,
    NotFound,
    OAuthConnect,
    Provider,
    ProviderError,
    Tasks,
    account_of,
    split_id,
)

if TYPE_CHECKING:
    from panager.services.accounts.oauth import OAuthLink

T = TypeVar("T")
log = logging.getLogger(__name__)

NOT_CONFIGURED = (
    "Calendars and tasks are not configured on this Panager instance: the admin must set "
    "up a provider, e.g. GOOGLE_CLIENT_ID and GOOGLE_CLIENT_SECRET (see docs/google.md)."
)


@dataclass(frozen=True)
class Connected:
    """One person's accounts, as read once (a turn's view)."""

    accounts: tuple[tuple[Provider, Account], ...] = ()

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What the person's connected accounts can do, together."""
        found: set[Capability] = set()
        for _, account in self.accounts:
            if account.connected:
                found |= account.capabilities
        return frozenset(found)

    def having(self, capability: Capability) -> list[tuple[Provider, Account]]:
        """The connected accounts that have `capability`, in provider order."""
        return [(p, a) for p, a in self.accounts if a.connected and capability in a.capabilities]


class AccountService:
    """The registered providers, and each person's accounts with them."""

    def __init__(self, providers: Sequence[Provider] = ()) -> None:
        self.providers = list(providers)

    def register(self, provider: Provider) -> None:
        """Add a provider after the app was wired (tests: the in-memory one)."""
        self.providers.append(provider)

    @property
    def names(self) -> tuple[str, ...]:
        """The registered providers' names (the id prefixes)."""
        return tuple(p.name for p in self.providers)

    def provider(self, name: str) -> Provider | None:
        """The registered provider called `name`."""
        return next((p for p in self.providers if p.name == name), None)

    def oauth_links(self) -> list[OAuthLink]:
        """The registered providers that connect by OAuth, as their links (/connect, the
        web callback, the replay after linking)."""
        return [p.connect.link for p in self.providers
                if isinstance(p.connect, OAuthConnect) and p.connect.link is not None]

    def oauth_link(self, name: str) -> OAuthLink | None:
        """The OAuth link of the provider called `name` (None: no such OAuth provider)."""
        return next((link for link in self.oauth_links() if link.name == name), None)

    def oauth_scopes(self, name: str, capabilities: frozenset[Capability]) -> tuple[str, ...]:
        """The scopes a link of OAuth provider `name` asks for to give `capabilities`."""
        provider = self.provider(name)
        if provider is None or not isinstance(provider.connect, OAuthConnect):
            return ()
        wanted = provider.connect.scopes
        return tuple(dict.fromkeys(s for c in Capability if c in capabilities
                                   for s in wanted.get(c, ())))

    def form_providers(self) -> list[Provider]:
        """The registered providers that connect by a form (the Connections page)."""
        return [p for p in self.providers if isinstance(p.connect, FormConnect)]

    def offers(self, capability: Capability) -> bool:
        """Whether any registered provider can give `capability` at all."""
        return any(capability in p.capabilities for p in self.providers)

    async def connected(self, user_id: int) -> Connected:
        """The person's accounts of every provider (a provider that fails to answer counts
        as none, logged; a call then says what is wrong)."""
        found: list[tuple[Provider, Account]] = []
        for provider in self.providers:
            try:
                accounts = await provider.accounts(user_id)
            except Exception as exc:
                log.warning("%s accounts of user %s could not be read (%s)", provider.title,
                            user_id, type(exc).__name__)
                continue
            found += [(provider, a) for a in accounts]
        return Connected(tuple(found))

    async def capabilities(self, user_id: int) -> frozenset[Capability]:
        """What the person can do now, across providers."""
        return (await self.connected(user_id)).capabilities

    async def require(self, user_id: int, capability: Capability) -> None:
        """Raise the first offering provider's "connect first" (or that none is set up)."""
        for provider in self.providers:
            if capability in provider.capabilities:
                await provider.require(user_id, capability)
                raise ProviderError(f"{provider.title} cannot do that for this account.")
        raise ProviderError(NOT_CONFIGURED)

    async def _serving(
        self,
        user_id: int,
        capability: Capability,
        make: Callable[[Provider, Account], T | None],
    ) -> list[tuple[Provider, Account, T]]:
        found = [
            (p, a, made)
            for p, a in (await self.connected(user_id)).having(capability)
            if (made := make(p, a)) is not None
        ]
        if not found:
            await self.require(user_id, capability)
        return found

    async def calendars(
        self, user_id: int, capability: Capability = Capability.CALENDAR_READ
    ) -> list[tuple[Provider, Account, Calendar]]:
        """Every connected account's `Calendar` with `capability` (at least one, or the
        provider's "connect first" is raised)."""
        return await self._serving(user_id, capability,
                                   lambda p, a: p.calendar(user_id, a))

    async def tasks_for(
        self, user_id: int, task_id: str = "", capability: Capability = Capability.TASKS_READ
    ) -> tuple[Provider, Account, Tasks]:
        """The task account `task_id` names, else the first with `capability`."""
        serving = await self._serving(user_id, capability, lambda p, a: p.tasks(user_id, a))
        return await self._route(user_id, serving, (task_id,), capability)

    async def mailbox_for(
        self, user_id: int, capability: Capability = Capability.MAIL_READ
    ) -> tuple[Provider, Account, Mailbox]:
        """The person's mailbox (the first account with `capability`)."""
        serving = await self._serving(user_id, capability, lambda p, a: p.mailbox(user_id, a))
        return serving[0]

    async def calendar_for(
        self, user_id: int, calendar_id: str, event_id: str = ""
    ) -> tuple[Provider, Account, Calendar]:
        """The account a write goes to: the one an id names (`"<provider>:…"`; an
        unqualified id is Google's), else the default (first) calendar account."""
        serving = await self.calendars(user_id, Capability.CALENDAR_WRITE)
        return await self._route(user_id, serving, (event_id, calendar_id),
                                 Capability.CALENDAR_WRITE)

    async def _route(
        self,
        user_id: int,
        serving: list[tuple[Provider, Account, T]],
        idents: tuple[str, ...],
        capability: Capability,
    ) -> tuple[Provider, Account, T]:
        for name, raw in (split_id(i, self.names) for i in idents if i):
            if name == GOOGLE and raw == "primary":
                continue
            mine = [item for item in serving if item[0].name == name]
            chosen = account_of(raw, [a for _, a, _ in mine])
            if chosen is not None:
                return next(item for item in mine if item[1] == chosen)
            if mine or name != GOOGLE:
                raise NotFound(f"No connected account holds {raw!r}; use the ids the list "
                               "tools show.")
            await self.require(user_id, capability)  # a Google id, and Google unlinked
        # "primary" (or no id): the account the person chose a default calendar in, else
        # the first (Google's primary, as before the upgrade)
        return next((item for item in serving if item[1].default), serving[0])
