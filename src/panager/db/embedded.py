"""The embedded PostgreSQL + pgvector server (the `pgserver` package).

With no `DATABASE_URL`, Panager keeps a private PostgreSQL under
`$PANAGER_HOME/pgdata`. `pgserver` starts it on a Unix socket on first use and,
with `cleanup_mode="stop"`, stops it when the last process using it exits; data
survives restarts.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from pathlib import Path

from panager.config import ConfigError

log = logging.getLogger(__name__)


def _ensure_runtime_dir() -> None:
    """Give platformdirs a private XDG_RUNTIME_DIR so its warning never reaches the chat screen."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and Path(current).is_dir() and (Path(current).stat().st_mode & 0o777) == 0o700:
        return
    path = Path(tempfile.gettempdir()) / f"panager-runtime-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(path)


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server in `data_dir`; return its libpq URI."""
    _ensure_runtime_dir()
    try:
        import pgserver
    except ImportError:
        raise ConfigError(
            "the embedded PostgreSQL (pgserver) is not available on this platform; "
            "set DATABASE_URL to a PostgreSQL server with the pgvector extension."
        ) from None
    data_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("pgserver").setLevel(logging.WARNING)
        server = pgserver.get_server(str(data_dir), cleanup_mode="stop")
    log.debug("embedded postgres ready in %s", data_dir)
    return server.get_uri()
