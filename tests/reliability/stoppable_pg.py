"""A private PostgreSQL (the pgserver binaries) that a test can stop and start again.

The session's shared server must never go down under other tests, so the
database-outage test runs against its own cluster: initialised and first
started by `pgserver` (which also handles running as root), then stopped and
restarted with `pg_ctl` on the same data directory and socket.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg


class StoppablePostgres:
    """One PostgreSQL cluster in a temp dir; `stop()` / `start()` simulate an outage."""

    def __init__(self) -> None:
        import pgserver
        from pgserver import _commands

        from panager.db.embedded import _ensure_runtime_dir

        self._commands = _commands
        self.data = Path(tempfile.mkdtemp(prefix="panager-rel-pg-"))
        _ensure_runtime_dir(self.data.parent / f"{self.data.name}-home")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._server = pgserver.get_server(str(self.data), cleanup_mode="stop")
        self.url = self._server.get_uri()
        self.socket_dir = parse_qs(urlsplit(self.url).query)["host"][0]
        self._user = "pgserver" if os.geteuid() == 0 else None

    def database(self, name: str) -> str:
        """Create database `name` (with pgvector available) and return its URL."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        parts = urlsplit(self.url)
        return parts._replace(path="/" + name).geturl()

    def stop(self) -> None:
        """Stop the server now (fast shutdown: sessions are cut off)."""
        self._pg_ctl(["-m", "fast", "-w", "stop"])

    def start(self) -> None:
        """Start the server again on the same data directory and socket."""
        options = ["-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.data / "log")]
        self._pg_ctl(["-w", *options, "start"])

    def close(self) -> None:
        """Stop the server for good (idempotent)."""
        with contextlib.suppress(Exception):
            self.stop()

    def _pg_ctl(self, args: list[str]) -> None:
        self._commands.pg_ctl(args, pgdata=self.data, user=self._user, timeout=30)
