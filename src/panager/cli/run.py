"""`panager run`: the Discord bot, the Telegram bot, the scheduler worker and the web server.

`--components` picks a subset, so the pieces can be spread over processes and
machines (they share nothing but PostgreSQL); by default every component whose
token is set runs, with the worker and the web server. `answers` runs the chat
front ends' answering without their intake, in any number of processes
(frontends/shared/workers.py; docs/deploy.md). A process without a
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

import typer

from panager import platforms
from panager.config import ConfigError, Settings
from panager.frontends.discord.front_end import DISCORD_FRONT_END
from panager.frontends.shared.front_end import FrontEnd, Running
from panager.frontends.telegram.front_end import TELEGRAM_FRONT_END
from panager.frontends.web.front_end import WEB_FRONT_END
from panager.tasks import cancel_and_wait

log = logging.getLogger("panager.run")

# One line per front end; nothing else in this module names one.
FRONT_ENDS: tuple[FrontEnd, ...] = (
    DISCORD_FRONT_END,
    TELEGRAM_FRONT_END,
    WEB_FRONT_END,
)
for _front_end in FRONT_ENDS:
    platforms.register(_front_end.platform)
CHATS = tuple(f for f in FRONT_ENDS if f.platform.chat)  # started before the worker
PAGES = tuple(f for f in FRONT_ENDS if not f.platform.chat)  # started after it
# `answers`: the chat front ends' answering without their intake, in any number of processes
# (frontends/shared/workers.py).
ANSWERS = "answers"
COMPONENTS = (
    *(f.platform.name for f in CHATS), ANSWERS, "worker", *(f.platform.name for f in PAGES)
)
ANSWERS_WITHOUT_TOKEN = (
    "--components answers needs a chat front end's token (DISCORD_TOKEN or "
    "TELEGRAM_BOT_TOKEN): it answers the messages those front ends stored."
)
STOP_TIMEOUT = 30.0


def default_components(settings: Settings) -> str:
    """The chat front ends whose tokens are set (the first one when none is), the worker and
    the web server."""
    chats = [f.platform.name for f in CHATS if f.configured(settings)]
    pages = [f.platform.name for f in PAGES if f.configured(settings)]
    return ",".join([*(chats or [CHATS[0].platform.name]), "worker", *pages])


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


def settings_problem(settings: Settings, chosen: list[str]) -> str | None:
    """The first front end's settings problem for these components, as one line."""
    if ANSWERS in chosen and not any(f.configured(settings) for f in CHATS if f.platform.inbox):
        return ANSWERS_WITHOUT_TOKEN
    for front_end in FRONT_ENDS:
        problem = front_end.settings_problem(settings, chosen=front_end.platform.name in chosen)
        if problem is not None:
            return problem
    return None


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


async def serve(settings: Settings, components: list[str], stop: asyncio.Event | None = None):
    """Start the components, run until `stop` (or a signal), then shut down in order."""
    stop = stop or asyncio.Event()
    for front_end in FRONT_ENDS:
        if front_end.platform.name in components:
            await front_end.check(settings)
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
    chosen = [f for f in CHATS if f.platform.name in components]
    try:
        for front_end in CHATS:
            if front_end in chosen:
                running.append(await front_end.start(app))
            elif ANSWERS in components and front_end.configured(app.settings):
                running += await front_end.answer_only(app)
            else:
                others = [f for f in chosen if f is not front_end]
                running += await front_end.deliver_only(app, alone=not others)
        if "worker" in components:
            running.append(await start_worker(app))
        for front_end in PAGES:
            if front_end.platform.name in components:
                running.append(await front_end.start(app))
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
    exc = task.exception()
    for front_end in FRONT_ENDS:
        explained = front_end.explain(exc) if exc is not None else None
        if explained is not None:
            raise ConfigError(explained)
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
            help="comma-separated subset of discord,telegram,answers,worker,web "
            "(default: the bots whose tokens are set, worker and web; answers: answer what "
            "the bots of another process stored)",
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
        problem = settings_problem(settings, chosen)
        if problem is not None:
            fail(problem)
        run_async(lambda: serve(settings, chosen))
