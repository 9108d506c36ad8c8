"""Every PostgreSQL advisory-lock key and namespace Panager uses, in one place.

Advisory locks are one shared space per database: two features using the same
namespace see each other's locks. A user's turn lock once shared its namespace
with the processes' presence locks, so a held turn lock could pass for a live
worker and keep a dead worker's claims from being taken back. Each feature
gets its own number here; `ALL` lets a test check that none repeats.
"""

from __future__ import annotations

MIGRATION_LOCK_KEY = 7_260_001  # one key: schema upgrades (db/migrate.py)
PRESENCE_NS = 7_260_002  # (ns, hashtext(owner)): a process is alive (db/presence.py)
BIND_LOCK_KEY = 7_260_003  # one key: the embedder binding (services/memory/binding.py)
SAVE_LOCK_NAMESPACE = 7_260_004  # (ns, user): memory saves (services/memory/service.py)
TURN_LOCK_NAMESPACE = 7_260_005  # (ns, user): one turn at a time (agent/turns/turnlock.py)
RELAY_LOCK_NAMESPACE = 7_260_012  # (ns, sender): the relay rate limit (services/relays/store.py)
LEADER_NS = 7_260_006  # (ns, hashtext(name)): one process leads: Telegram polling (db/leader.py)
IDENTITY_LOCK_NAMESPACE = 7_260_007  # (ns, hashtext(platform:id)): a new person (services/users.py)
LINK_LOCK_NAMESPACE = 7_260_022  # (ns, person) joins; (ns, hashtext(platform:id)) link attempts

ALL = {
    "migration": MIGRATION_LOCK_KEY,
    "presence": PRESENCE_NS,
    "bind": BIND_LOCK_KEY,
    "memory_save": SAVE_LOCK_NAMESPACE,
    "turn": TURN_LOCK_NAMESPACE,
    "relay": RELAY_LOCK_NAMESPACE,
    "leader": LEADER_NS,
    "identity": IDENTITY_LOCK_NAMESPACE,
    "link": LINK_LOCK_NAMESPACE,
}
