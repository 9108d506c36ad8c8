"""What tools and slash commands may use: the services, settings and clock. Built once by the app.

Every field is created in exactly one place (`App.start`); nothing here builds a
service on demand. `memory` is None where the feature is off (a bare graph in a test);
so are `web` and `search`; `accounts` holds every registered provider (Google among them
when configured) and answers which connect by OAuth (`oauth_links`) or by a form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from panager.agent.graph.runtime import AgentRuntime
    from panager.clock import Clock
    from panager.config import RuntimeConfig, Settings
    from panager.db.pool import Pool
    from panager.services.access import AccessService
    from panager.services.accounts.connections import Connections
    from panager.services.accounts.oauth import OAuthLink
    from panager.services.accounts.service import AccountService
    from panager.services.mcp.hub import McpHub
    from panager.services.media.intake import MediaIntake
    from panager.services.memory.service import MemoryService
    from panager.services.messengers import FanoutMessenger
    from panager.services.profile import ProfileService
    from panager.services.proposals import ProposalService
    from panager.services.relays.relay import UserMessageRelay
    from panager.services.relays.store import RelayService
    from panager.services.schedules.service import ScheduleService
    from panager.services.schedules.system import SystemJobService
    from panager.services.usage import UsageService
    from panager.services.users import UserService
    from panager.services.web.fetch import WebFetcher
    from panager.services.web.search import SearchProvider
    from panager.services.web_sessions import WebSessionService


@dataclass(frozen=True)
class AgentDeps:
    """Shared services; per-user tools close over one user plus these."""

    settings: Settings
    config: RuntimeConfig
    clock: Clock
    pool: Pool
    users: UserService
    access: AccessService
    usage: UsageService
    relays: RelayService  # who accepts relayed messages from whom; the relay rate
    web_sessions: WebSessionService  # sign-in links and sessions of the web page
    scheduler: ScheduleService
    messenger: FanoutMessenger  # delivery to users (terminal, Discord), filled by front ends
    runtime: AgentRuntime  # effects, compactor, skills, sessions, activity (commands)
    memory: MemoryService | None = None
    accounts: AccountService | None = None  # the providers (calendars, tasks, mail), see app.py
    connections: Connections | None = None  # form-connected accounts, sealed; None without a key
    relay: UserMessageRelay | None = None  # send_user_message; None unless enabled
    web: WebFetcher | None = None  # web_fetch; None when turned off (or in a bare test graph)
    search: SearchProvider | None = None  # web_search; None unless a provider is configured
    mcp: McpHub | None = None  # MCP servers (mcp_servers in the config); None when none
    system_jobs: SystemJobService | None = None  # heartbeat, briefing, webhooks
    proposals: ProposalService | None = None  # calls unattended runs held for approval
    media: MediaIntake | None = None  # attachments (images, voice, documents)
    profiles: ProfileService | None = None  # the standing profile in every prompt

    @property
    def google(self) -> OAuthLink | None:
        """Google's OAuth link, through the registry (None when Google is not configured);
        the agent asks `accounts` which providers connect by OAuth instead of naming one."""
        return self.accounts.oauth_link("google") if self.accounts is not None else None
