"""Real Chromium for the web page tests: Debian's `chromium` driven by Playwright.

Never `playwright install`: the browser is the system package, which
`scripts/test` installs when it is missing. Screenshots are taken on every run; they are
written to docs/screenshots/ (the README shows them) only with PANAGER_SCREENSHOTS=docs, so
a test run leaves the tracked pictures alone; otherwise to a temporary folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Page, async_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-dev-shm-usage",
]
SCREENSHOTS = (
    Path(__file__).resolve().parents[1] / "docs" / "screenshots"
    if os.environ.get("PANAGER_SCREENSHOTS") == "docs"
    else Path(tempfile.gettempdir()) / "panager-screenshots"
)
VIEWPORT = {"width": 1280, "height": 860}


def chromium_path() -> str:
    """The system Chromium; fails (not skips) with the fix when it is missing."""
    found = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    assert found, "Chromium is missing: run ./scripts/test (it installs it) or apt-get install chromium"
    return found


class Browsers:
    """One Chromium for a test module; a fresh context (cookie jar) per person."""

    def __init__(self) -> None:
        self._pw = None
        self.browser: Browser | None = None
        self.errors: list[str] = []

    async def start(self) -> Browsers:
        self._pw = await async_playwright().start()
        self.browser = await self._pw.chromium.launch(
            executable_path=chromium_path(), args=ARGS, headless=True
        )
        return self

    async def person(self) -> tuple[BrowserContext, Page]:
        """A new browser profile and a page in it; CSP violations and JS errors recorded."""
        context = await self.browser.new_context(viewport=VIEWPORT, locale="en-GB")
        page = await context.new_page()
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", self._console)
        return context, page

    def _console(self, message) -> None:
        # error statuses (404, 410, 403 pages) are the tests' intent, not page errors
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(f"console: {message.text}")

    async def stop(self) -> None:
        if self.browser is not None:
            await self.browser.close()
        if self._pw is not None:
            await self._pw.stop()


async def shot(page: Page, name: str) -> None:
    """Save a full-page screenshot as <name>.png (docs/screenshots/ with
    PANAGER_SCREENSHOTS=docs)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
