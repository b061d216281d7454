"""Browser tests: headless Chromium from Debian's packages (`chromium`, `chromium-driver`), driven by
Selenium, against the gateway served by a real HTTP server (uvicorn on a free loopback port).

Without the browser the tests are skipped with a message; CI sets CITADEL_REQUIRE_BROWSER=1 (.ci/run
installs the packages), which makes its absence a failure instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.live_server import LiveServer
from tests.required import missing

# the running example's fixtures (a home with Northwind, the CRM, the fake clock)
from tests.integration.test_approvals_api import clock, planned_by_rules  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PAGE_LOAD_TIMEOUT_S = 30


def _missing(message: str) -> None:
    missing("BROWSER", message, "the browser tests are skipped")


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium driven through Debian's chromedriver; always quit afterwards."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if absent:
        _missing(f"{' and '.join(absent)} not found (install the Debian packages `chromium chromium-driver`)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[dev]')")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}",
                     "--window-size=1280,1000"):
        options.add_argument(argument)
    service = Service(str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_window_size(1280, 1000)
        driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
        yield driver
    finally:
        driver.quit()




@pytest.fixture
def live_deployment(planned_by_rules):
    """The running example's deployment of tests/integration/test_approvals_api.py (Northwind
    ingested, the rules planner, the example CRM on loopback), its gateway also served over real HTTP
    on 127.0.0.1; yields (home, TestClient on the same app, CrmStore, base URL)."""
    home, client, crm = planned_by_rules
    server = LiveServer(client.app).start()
    try:
        yield home, client, crm, server.url
    finally:
        server.stop()


@pytest.fixture
def screenshots() -> Path:
    """Where the browser tests leave their screenshots: the repository's var/ (git-ignored)."""
    folder = REPO / "var"
    folder.mkdir(exist_ok=True)
    return folder
