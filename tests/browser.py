"""Debian's Chromium, headless, through Selenium (the fleet page's browser tests and
bench/bench_fleet_browser.py): the paths are given explicitly, so Selenium Manager never tries
to download a browser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
MISSING = "needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"


def available() -> bool:
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


def chromium(user_dir: Path, window: str = "1400,1000") -> Any:
    """A new headless Chromium (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--window-size={window}",
        f"--user-data-dir={user_dir}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
