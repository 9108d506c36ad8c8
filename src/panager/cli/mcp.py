"""`panager mcp list` and `panager mcp approve NAME`: the operator's view of MCP servers.

`approve` starts the server once, so what it approves is what the server lists now
(not only what a running Panager saw last), shows every tool's description and every
parameter description in full (as the model will get them, capped), asks (unless
`--yes`), pins every tool as listed, and prints what changed. Approved text then counts
as the operator's own. Running processes pick the approval up at their next turn.
"""

from __future__ import annotations

import getpass

import typer

from panager.config import Settings

mcp_app = typer.Typer(help="MCP servers: state, tools, approvals.", no_args_is_help=True)
START_WAIT = 30.0


def register(app: typer.Typer) -> None:
    """Attach `panager mcp …` to the main CLI."""
    app.add_typer(mcp_app, name="mcp")


@mcp_app.command("list")
def list_servers() -> None:
    """Each configured server: state, tools offered, tools awaiting approval."""
    from panager.cli.common import run_async, settings_or_exit, setup_logging

    settings = settings_or_exit()
    setup_logging()
    raise typer.Exit(run_async(lambda: list_command(settings)))


@mcp_app.command("approve")
def approve(
    name: str = typer.Argument(..., help="the server's name under mcp_servers"),
    yes: bool = typer.Option(False, "--yes", help="approve without asking (after reading)"),
) -> None:
    """Show the server's tools in full and approve them as it lists them now."""
    from panager.cli.common import run_async, settings_or_exit, setup_logging

    settings = settings_or_exit()
    setup_logging()
    raise typer.Exit(run_async(lambda: approve_command(settings, name, yes=yes)))


async def _hub(settings: Settings, only: str | None = None):
    from panager.app import ensure_schema
    from panager.db.pool import open_pool, resolve_database_url
    from panager.services.mcp.hub import McpHub
    from panager.services.mcp.pins import PinStore

    servers = settings.runtime.mcp_servers
    if only is not None:
        servers = {only: servers[only]}
    url = resolve_database_url(settings)
    await ensure_schema(url, settings.auto_migrate)
    pool = await open_pool(url, max_size=2)
    hub = McpHub(servers, PinStore(pool), home=settings.home)
    await hub.start(wait=START_WAIT)
    return hub, pool


def status_lines(statuses) -> list[str]:
    """One line per server (and one per tool awaiting approval or left out)."""
    lines = []
    for s in statuses:
        head = f"{s.name:<16} {s.state:<10} {s.transport:<5} {s.offered}/{s.tools} tools offered"
        lines.append(head + f"  users: {s.users}" + ("  read_only" if s.read_only else ""))
        if s.error:
            lines.append(f"    error: {s.error}")
        lines.extend(f"    awaiting approval: {t}" for t in s.awaiting_approval)
        lines.extend(f"    left out: {t}" for t in s.left_out)
    return lines


async def list_command(settings: Settings) -> int:
    """Print every server's state; 1 when one is not ready."""
    if not settings.runtime.mcp_servers:
        typer.echo("No MCP servers configured (mcp_servers in the config; see docs/tools.md).")
        return 0
    hub, pool = await _hub(settings)
    try:
        statuses = await hub.status()
    finally:
        await hub.stop()
        await pool.close()
    for text in status_lines(statuses):
        typer.echo(text)
    return 0 if all(s.state == "ready" for s in statuses) else 1


def review_lines(name: str, tools) -> list[str]:
    """Every tool's words as the model will get them, in full, for the operator to read."""
    lines = [f"MCP server {name}: what the model will read as your own words:"]
    for t in tools:
        mark = "" if t.approved else "  [new or changed]"
        lines.append(f"- {t.name}{mark}")
        lines.append(f"    description: {t.description or '(none)'}")
        lines.extend(f"    parameter {where}: {text}" for where, text in t.parameters)
    return lines


async def approve_command(settings: Settings, name: str, *, yes: bool = False) -> int:
    """Approve `name`'s tools as listed now; 1 when the server is unknown or not reachable."""
    servers = settings.runtime.mcp_servers
    if name not in servers:
        known = ", ".join(sorted(servers)) or "none configured"
        typer.echo(f"panager: no MCP server named {name!r} (configured: {known})", err=True)
        return 1
    hub, pool = await _hub(settings, only=name)
    try:
        (status,) = await hub.status()
        if status.state != "ready":
            typer.echo(
                f"panager: MCP server {name} did not start ({status.error or status.state}); "
                "nothing approved",
                err=True,
            )
            return 1
        for text in review_lines(name, hub.review(name)):
            typer.echo(text)
        if not yes and not _confirmed("Approve these tools as listed?"):
            typer.echo("Nothing approved.")
            return 1
        changed = await hub.approve(name, f"cli:{_operator()}")
    finally:
        await hub.stop()
        await pool.close()
    if changed:
        typer.echo(f"Approved {len(changed)} tool(s) of {name}: {', '.join(changed)}.")
    else:
        typer.echo(f"Nothing to approve: every tool of {name} is as approved.")
    return 0


def _confirmed(question: str) -> bool:
    """The operator's yes (no answer, as from a closed stdin, is a no)."""
    try:
        return typer.confirm(question, default=False)
    except (typer.Abort, EOFError):
        return False


def _operator() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "operator"
