"""Headless Debian Chromium driven by Selenium, for the console and API-docs tests.

``make test`` installs ``chromium`` and ``chromium-driver`` with apt-get when they are
missing (``make chromium``); where it could not, :func:`chromium` skips the test and
says why.
"""

from __future__ import annotations

import os

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium(*, binary: str = CHROMIUM, console_log: bool = False, extra_args=()):
    """A new headless Chromium (1280x900); ``console_log`` keeps the browser's console
    messages (CSP refusals show there). Skips the test if Chromium is not installed."""
    if not (os.path.exists(binary) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("Debian's chromium and chromium-driver are not installed (make test "
                    "installs them with apt-get; it could not here)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = binary
    if console_log:
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--disable-extensions", "--no-first-run", *extra_args):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
