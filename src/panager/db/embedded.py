"""The embedded PostgreSQL + pgvector server (the `pgserver` package).

With no `DATABASE_URL`, Panager keeps a private PostgreSQL under
`$PANAGER_HOME/pgdata`. `pgserver` starts it on a Unix socket on first use and,
with `cleanup_mode="stop"`, stops it when the last process using it exits; data
survives restarts. Its runtime directory (XDG_RUNTIME_DIR, for platformdirs) is
`$PANAGER_HOME/run` unless a private one is already set.
"""

from __future__ import annotations

import logging
import os
import stat
import warnings
from pathlib import Path

from panager.config import ConfigError

log = logging.getLogger(__name__)


def _ensure_runtime_dir(base: Path) -> None:
    """Give platformdirs a private XDG_RUNTIME_DIR so its warning never reaches the chat screen.

    A usable one (ours, 0700) is kept. Otherwise `base/run` is made — under PANAGER_HOME,
    not a predictable /tmp name another local account could create first — and checked:
    a directory (not a link), owned by this user, mode 0700."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and _private_dir(Path(current)):
        return
    path = base / "run"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.is_symlink() or path.stat().st_uid != os.getuid():
        raise ConfigError(
            f"{path} is not a directory owned by this user; remove it (it should be a private "
            "directory Panager creates) and start again."
        )
    path.chmod(0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(path)


def _private_dir(path: Path) -> bool:
    """A real directory owned by this user that only this user can enter."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and (
        stat.S_IMODE(info.st_mode) == 0o700)


def ensure_server_user() -> None:
    """As root, pgserver runs PostgreSQL as a `pgserver` account it creates with `useradd`.

    Its own lock lives in the runtime directory, which is per home, so two processes with
    different homes (parallel test workers, two instances on a new machine) could both
    find the account missing and race `useradd`: one of them then initialises its data
    directory for an account id that no longer exists ("could not change permissions").
    The check-and-create runs under a lock on /etc/passwd itself, machine-wide."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    import fcntl

    try:
        with warnings.catch_warnings():  # pgserver reads the runtime directory on import
            warnings.simplefilter("ignore")
            from pgserver.utils import ensure_user_exists
    except ImportError:  # no embedded server on this platform: start_embedded says so
        return

    with open("/etc/passwd", "rb") as passwd:
        fcntl.flock(passwd, fcntl.LOCK_EX)
        try:
            ensure_user_exists("pgserver")
        finally:
            fcntl.flock(passwd, fcntl.LOCK_UN)


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server in `data_dir`; return its libpq URI."""
    _ensure_runtime_dir(data_dir.parent)
    try:
        import pgserver
    except ImportError:
        raise ConfigError(
            "the embedded PostgreSQL (pgserver) is not available on this platform; "
            "set DATABASE_URL to a PostgreSQL server with the pgvector extension."
        ) from None
    data_dir.mkdir(parents=True, exist_ok=True)
    ensure_server_user()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("pgserver").setLevel(logging.WARNING)
        server = pgserver.get_server(str(data_dir), cleanup_mode="stop")
    log.debug("embedded postgres ready in %s", data_dir)
    return server.get_uri()
