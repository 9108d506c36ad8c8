"""What every `panager` command shares: settings or a one-line exit, running a coroutine with
errors as one line, and quiet logs. Below cli/main.py and each command group, so a group
imports it and not the entry point that registers the group."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import typer

from panager.config import ConfigError, Settings, load_settings


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit."""
    typer.echo(f"panager: {message}", err=True)
    raise typer.Exit(code)


def settings_or_exit() -> Settings:
    """Load settings, turning ConfigError into a one-line exit."""
    try:
        settings = load_settings()
        _ = settings.runtime
        return settings
    except ConfigError as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


def run_async(factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine; configuration and database errors become one line, never a traceback."""
    try:
        return asyncio.run(factory())
    except ConfigError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except OSError as exc:
        fail(f"cannot reach the database or a service: {exc.strerror or exc}")
    except Exception as exc:
        if type(exc).__name__ == "PoolTimeout":
            where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "the embedded database"
            fail(f"cannot connect to {where} within 30 s; check that the server is running")
        if type(exc).__module__.startswith("psycopg"):
            fail(f"database error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        raise


LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"


def setup_logging(debug: bool = False) -> None:
    """Quiet logs on stderr for interactive commands; every line starts with its time."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format=LOG_FORMAT,
        datefmt=LOG_DATEFMT,
        stream=sys.stderr,
    )
    for noisy in ("httpx", "openai", "httpcore", "pgserver", "discord", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # the pool retries a refused connection with a warning each time; we say it once
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
