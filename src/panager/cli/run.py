"""`panager run`: the Discord bot, the Telegram bot, the scheduler worker and the web server.

`--components` picks a subset, so the pieces can be spread over processes and
machines (they share nothing but PostgreSQL); by default every component whose
token is set runs, with the worker and the web server. A process without a
bot still delivers (reminders, answers replayed after a Google link) over the
platform's HTTP API when its token is set. SIGTERM or SIGINT stops the
process gracefully: running turns and deliveries get a moment to finish, the
bot disconnects, the web server closes, then the database pool.

Failures that need the operator (a rejected or malformed token, a
TELEGRAM_API_URL that is not a Bot API server, a missing privileged intent, a
component this build lacks) end the process with one line, never a traceback
and never a token. The bots' tokens are checked before the database starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import typer

from panager.config import ConfigError, Settings
from panager.tasks import cancel_and_wait

log = logging.getLogger("panager.run")

COMPONENTS = ("discord", "telegram", "worker", "web")
STOP_TIMEOUT = 30.0
TOKEN_REJECTED = (
    "DISCORD_TOKEN was rejected by Discord; copy a new token from the Developer Portal "
    "(your application → Bot → Reset Token) into DISCORD_TOKEN."
)
TOKEN_MISSING = (
    "DISCORD_TOKEN is not set; create a bot (see docs/discord.md) and set DISCORD_TOKEN, "
    "or leave discord out: --components worker,web."
)
TELEGRAM_TOKEN_MISSING = (
    "TELEGRAM_BOT_TOKEN is not set; create a bot with @BotFather (see docs/telegram.md) and "
    "set TELEGRAM_BOT_TOKEN, or leave telegram out of --components."
)
INTENT_MISSING = (
    "Discord refused the Message Content intent; enable it in the Developer Portal "
    "(your application → Bot → Privileged Gateway Intents → Message Content Intent) and restart."
)


class ComponentUnavailable(ConfigError):
    """A requested component is not part of this build."""


@dataclass
class Running:
    """A started component: what to watch and how to stop it."""

    name: str
    stop: Callable[[], Awaitable[None]]
    task: asyncio.Task | None = None
    detail: str = ""


def default_components(settings: Settings) -> str:
    """The bots whose tokens are set (Discord when none is), the worker and the web server."""
    bots = [
        name
        for name, token in (
            ("discord", settings.discord_token),
            ("telegram", settings.telegram_bot_token),
        )
        if token
    ]
    return ",".join([*(bots or ["discord"]), "worker", "web"])


def parse_components(text: str) -> list[str]:
    """'discord,worker' → ['discord', 'worker']; unknown names raise ConfigError."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown or not names:
        raise ConfigError(
            f"--components {text!r} is invalid; use a comma-separated subset of "
            f"{','.join(COMPONENTS)}."
        )
    return [c for c in COMPONENTS if c in names]


async def rest_client(token: str):
    """A discord.py client logged in over REST only (no gateway); errors become one line."""
    import aiohttp
    import discord

    from panager.frontends.discord.bot import patch_discord_py

    patch_discord_py()
    client = discord.Client(intents=discord.Intents(guilds=True))
    try:
        await client.login(token)
    except discord.LoginFailure:
        await client.close()
        raise ConfigError(TOKEN_REJECTED) from None
    except (aiohttp.ClientError, OSError) as exc:
        await client.close()
        raise ConfigError(f"cannot reach Discord ({exc}); check the network.") from None
    return client


async def check_discord_token(token: str) -> None:
    """Fail fast, before the database starts, when Discord rejects the token."""
    await (await rest_client(token)).close()


async def check_telegram(settings: Settings) -> None:
    """Fail fast, before the database starts, when Telegram rejects the token or
    TELEGRAM_API_URL is not a Bot API server (one line, never the token)."""
    from panager.frontends.telegram.api import close_bot, make_bot, start_problem

    token, url = settings.telegram_bot_token or "", settings.telegram_api_url
    bot = make_bot(token, url)
    try:
        await bot.get_me()
    except Exception as exc:
        raise ConfigError(start_problem(exc, url, token)) from None
    finally:
        await close_bot(bot)


async def start_discord(app) -> Running:
    """Log the bot in (a bad token fails here, with one line) and connect the gateway."""
    import aiohttp
    import discord

    from panager.frontends.discord.bot import PanagerBot

    bot = PanagerBot(app)
    try:
        await bot.login(app.settings.discord_token)
    except discord.LoginFailure:
        await bot.close()
        raise ConfigError(TOKEN_REJECTED) from None
    except (aiohttp.ClientError, OSError) as exc:
        await bot.close()
        raise ConfigError(f"cannot reach Discord ({exc}); check the network.") from None
    task = asyncio.create_task(bot.connect(reconnect=True), name="discord")
    return Running("discord", bot.close, task, f"as {bot.user}")


async def start_telegram(app) -> Running:
    """Check the token (getMe; a bad one, or a TELEGRAM_API_URL that is not a Bot API server,
    fails here with one line that never holds the token), then poll or take the webhook's
    updates."""
    from panager.frontends.telegram.api import start_problem
    from panager.frontends.telegram.bot import TelegramFrontEnd

    settings = app.settings
    front = TelegramFrontEnd(app)
    try:
        await front.start()
    except BaseException as exc:
        try:
            await front.close()
        except Exception:
            log.warning("the Telegram bot did not close cleanly")
        if isinstance(exc, Exception):
            problem = start_problem(exc, settings.telegram_api_url, settings.telegram_bot_token)
            raise ConfigError(problem) from None
        raise
    return Running("telegram", front.close, None, f"as @{front.username}")


async def start_telegram_delivery(app) -> list[Running]:
    """Without the Telegram bot in this process, reminders still reach Telegram people."""
    if not app.settings.telegram_bot_token:
        return []
    from panager.frontends.telegram.api import close_bot, make_bot
    from panager.frontends.telegram.messenger import TelegramMessenger

    settings = app.settings
    bot = make_bot(settings.telegram_bot_token, settings.telegram_api_url)
    messenger = TelegramMessenger(bot, app.deps.users)
    app.deps.messenger.add(messenger)

    async def close() -> None:
        with contextlib.suppress(ValueError):
            app.deps.messenger.messengers.remove(messenger)
        await close_bot(bot)

    return [Running("telegram-delivery", close)]


async def start_worker(app) -> Running:
    """Run the scheduler worker until stopped."""
    stop = asyncio.Event()
    task = asyncio.create_task(app.run_worker(stop), name="worker")

    async def close() -> None:
        stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT)
        except TimeoutError:
            await cancel_and_wait([task])

    return Running("worker", close, task)


async def start_rest_delivery(app) -> list[Running]:
    """Without the bot in this process, reminders and OAuth replays still reach Discord
    users: a logged-in client without a gateway connection sends DMs over REST."""
    token = app.settings.discord_token
    if not token:
        log.warning(
            "DISCORD_TOKEN is not set: this process cannot deliver to Discord users "
            "(their reminders wait for a process that can)"
        )
        return []
    from panager.frontends.discord.messenger import DiscordMessenger

    client = await rest_client(token)
    messenger = DiscordMessenger(client, app.deps.users)
    app.deps.messenger.add(messenger)

    async def close() -> None:
        with contextlib.suppress(ValueError):
            app.deps.messenger.messengers.remove(messenger)
        await client.close()

    return [Running("discord-delivery", close)]


async def start_web_component(app) -> Running:
    """Serve the OAuth callback and /healthz."""
    try:
        from panager.frontends.web.server import start_web
    except ImportError:
        raise ComponentUnavailable(
            "the web server is not available in this build; leave out 'web'."
        ) from None
    settings = app.settings
    try:
        server = await start_web(app)
    except OSError as exc:
        raise ConfigError(
            f"the web server cannot listen on {settings.http_host}:{settings.http_port} "
            f"({exc.strerror or exc}); free the port or set PANAGER_HTTP_PORT."
        ) from None
    return Running("web", server.stop, None, f"on {server.url}")


async def serve(settings: Settings, components: list[str], stop: asyncio.Event | None = None):
    """Start the components, run until `stop` (or a signal), then shut down in order."""
    stop = stop or asyncio.Event()
    if "discord" in components:
        await check_discord_token(settings.discord_token or "")
    if "telegram" in components:
        await check_telegram(settings)
    from panager.app import App  # the agent stack loads only once the tokens are known good

    app = await App.start(settings)
    running: list[Running] = []
    try:
        running = await _start_all(app, components)
        logging.getLogger("panager").setLevel(logging.INFO)
        parts = [f"{r.name} {r.detail}".strip() for r in running if r.name in COMPONENTS]
        log.info("panager is running: %s", ", ".join(parts))
        with _signals_set(stop):
            await _wait(stop, running)
    finally:
        await _stop_all(running)
        await app.stop()
    log.info("panager stopped")


async def _start_all(app, components: list[str]) -> list[Running]:
    running: list[Running] = []
    try:
        if "discord" in components:
            running.append(await start_discord(app))
        elif app.settings.discord_token or "telegram" not in components:
            running += await start_rest_delivery(app)
        if "telegram" in components:
            running.append(await start_telegram(app))
        else:
            running += await start_telegram_delivery(app)
        if "worker" in components:
            running.append(await start_worker(app))
        if "web" in components:
            running.append(await start_web_component(app))
    except BaseException:
        await _stop_all(running)
        raise
    return running


async def _wait(stop: asyncio.Event, running: list[Running]) -> None:
    """Until stop is set or a component ends; a component's failure becomes one line."""
    stopper = asyncio.create_task(stop.wait())
    watched = {r.task for r in running if r.task is not None}
    try:
        done, _ = await asyncio.wait({stopper, *watched}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    for task in done - {stopper}:
        _raise_component_failure(task)


def _raise_component_failure(task: asyncio.Task) -> None:
    import discord

    exc = task.exception()
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        raise ConfigError(INTENT_MISSING)
    if isinstance(exc, discord.LoginFailure):
        raise ConfigError(TOKEN_REJECTED)
    if exc is not None:
        log.error("%s stopped with an error", task.get_name(), exc_info=exc)
        raise ConfigError(f"{task.get_name()} stopped: {type(exc).__name__}: {exc}")
    log.warning("%s stopped; shutting down", task.get_name())


async def _stop_all(running: list[Running]) -> None:
    for component in reversed(running):
        try:
            await component.stop()
        except Exception:
            log.exception("error while stopping %s", component.name)
        if component.task is not None and not component.task.done():
            await cancel_and_wait([component.task])


@contextlib.contextmanager
def _signals_set(stop: asyncio.Event):
    """SIGTERM and SIGINT set `stop` (graceful shutdown) while the block runs."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def register(cli: typer.Typer) -> None:
    """Attach `panager run`."""

    @cli.command("run")
    def run(
        components: str = typer.Option(
            "",
            "--components",
            "-c",
            help="comma-separated subset of discord,telegram,worker,web "
            "(default: the bots whose tokens are set, worker and web)",
        ),
        debug: bool = typer.Option(False, "--debug", help="verbose logs"),
    ) -> None:
        """Run the Discord and Telegram bots, scheduler worker and web server (or some)."""
        from panager.cli.common import fail, run_async, settings_or_exit, setup_logging

        settings = settings_or_exit()
        setup_logging(debug)
        try:
            chosen = parse_components(components or default_components(settings))
        except ConfigError as exc:
            fail(str(exc))
        if "discord" in chosen and not settings.discord_token:
            fail(TOKEN_MISSING)
        if "telegram" in chosen and not settings.telegram_bot_token:
            fail(TELEGRAM_TOKEN_MISSING)
        if settings.telegram_bot_token:  # the bot or the delivery uses it: check its shape now
            from panager.frontends.telegram.api import check_token

            try:
                check_token(settings.telegram_bot_token)
            except ConfigError as exc:
                fail(str(exc))
        run_async(lambda: serve(settings, chosen))
