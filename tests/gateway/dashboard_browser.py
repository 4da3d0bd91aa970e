"""What the dashboard's browser tests share: a page of Debian's Chromium driven by Playwright (never a browser
Playwright downloads), console errors collected, screenshots saved where the test output names them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.prerequisites import chromium_path

WAIT_MS = 30_000  # the page refreshes every few seconds; a loaded machine may take several


@contextmanager
def chromium_page() -> Iterator:
    """A fresh page; `page.console_errors` lists the console's errors and uncaught exceptions."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: Chromium's sandbox refuses to run as root, which CI's machines are.
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.console_errors = []
            page.on("console", lambda message: message.type == "error" and page.console_errors.append(message.text))
            page.on("pageerror", lambda error: page.console_errors.append(str(error)))
            yield page
        finally:
            browser.close()


def sign_in(page, url: str, key: str = BOOTSTRAP_KEY) -> None:
    page.goto(f"{url}/dashboard")
    page.fill("#api-key", key)
    page.click("#sign-in button[type=submit]")


def screenshot(page, path: Path, record_property) -> None:
    """A full-page screenshot, its path printed (`pytest -rA` shows it) and recorded as a property (JUnit XML)."""
    page.screenshot(path=str(path), full_page=True)
    record_property("screenshot", str(path))
    print(f"screenshot: {path}")
