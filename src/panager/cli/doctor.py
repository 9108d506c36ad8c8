"""`panager doctor`: one line per check, OK or FAIL with the fix."""

from __future__ import annotations

import typer

from panager.config import ConfigError, load_settings
from panager.doctor import line, run_checks


async def run_doctor() -> int:
    """Run every check; exit code 1 when any failed."""
    try:
        settings = load_settings()
        _ = settings.runtime
    except ConfigError as exc:
        typer.echo(line(False, "config", str(exc)))
        return 1
    typer.echo(line(True, "config", f"settings valid (PANAGER_HOME={settings.home})"))
    failed = False
    for name, ok, detail in await run_checks(settings):
        failed = failed or ok is False
        typer.echo(line(ok, name, detail))
    return 1 if failed else 0
