"""The dashboard in a real browser (Debian's Chromium driven by Playwright) on a running platform with traffic:
a wrong key is refused with a message; the right one shows the deployment, its request and error counts in the
charts' headings, the billed requests under the cost chart and the refused requests in the failures list.
Screenshots are saved in the test's tmp dir; their paths are printed and recorded as the test's properties
(`pytest -rA` shows them). The sampler runs every 0.2 s here, so the charts fill without waiting long."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload
from tests.gateway.dashboard_browser import WAIT_MS, chromium_page, screenshot, sign_in

GOOD = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
BAD = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1.0, 2.0, 3.0]}]}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path / 'meta.db'}",
        bootstrap_key=BOOTSTRAP_KEY,
        compile_runner=COMPILE_RUNNER,
        dashboard_sample_s=0.2,
    )


@pytest.fixture
def browser_page():
    with chromium_page() as page:
        yield page


@pytest.mark.needs("chromium")
def test_dashboard_shows_the_traffic(server, model_bytes, browser_page, tmp_path, record_property):
    c = server.client()
    assert upload(c, "tiny", model_bytes).status_code == 201
    deployment = deploy_and_wait(c, "tiny")
    assert deployment["status"] == "ready"
    for _ in range(8):
        assert c.post("/v2/models/tiny/infer", json=GOOD).status_code == 200
    for _ in range(3):
        assert c.post("/v2/models/tiny/infer", json=BAD).status_code == 400

    page = browser_page
    sign_in(page, server.url, "lm_not-a-key-of-anyone-0123456789abcdef")
    page.wait_for_selector("#sign-in-error:has-text('refused')", timeout=WAIT_MS)
    assert "invalid or revoked API key" in page.text_content("#sign-in-error")
    assert page.is_hidden("#board")
    screenshot(page, tmp_path / "dashboard-wrong-key.png", record_property)

    page.fill("#api-key", BOOTSTRAP_KEY)
    page.click("#sign-in button[type=submit]")
    row = page.wait_for_selector(f"#deployments tr[data-deployment-id='{deployment['id']}']", timeout=WAIT_MS)
    cells = [cell.text_content() for cell in row.query_selector_all("td")]
    assert cells[:4] == ["tiny", "1", "ready", "cpu"] and re.fullmatch(r"[1-9]\d* / 0", cells[5])
    # Every request sent falls in the window once the sampler's next interval after them has ended.
    heading = f".deployment-charts[data-deployment-id='{deployment['id']}'] h3"
    page.wait_for_selector(f"{heading}:has-text('11 requests, 3 errors')", timeout=WAIT_MS)
    charts = page.query_selector_all(f".deployment-charts[data-deployment-id='{deployment['id']}'] figure")
    assert [f.get_attribute("data-chart") for f in charts] == ["Requests", "Errors", "Latency", "Queue depth"]
    assert all(f.query_selector("polyline, circle") for f in charts)  # each chart drew its points
    assert "8 billed requests" in page.text_content("[data-chart='cost'] figcaption")
    assert page.query_selector_all("[data-chart='cost'] rect")  # a bar per day
    failures = page.query_selector_all("#failures tbody tr")
    assert len(failures) == 3
    for failure in failures:
        _, model, status, reason, message, request_id = (td.text_content() for td in failure.query_selector_all("td"))
        assert (model, status, reason) == ("tiny v1", "400", "invalid")
        assert "input 'x' must have shape" in message and re.fullmatch(r"[0-9a-f]{32}", request_id)
    screenshot(page, tmp_path / "dashboard.png", record_property)

    # Signing out while a refresh still waits for the server (its series request held here) keeps the board
    # hidden once the answer arrives: the late refresh neither draws the board again nor schedules another.
    held = []
    page.route("**/v1/dashboard/deployments/*/series*", lambda route: held.append(route))
    page.select_option("#window", "3600")  # a refresh now
    for _ in range(WAIT_MS // 50):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the window change started no refresh"
    page.click("#sign-out")
    assert page.is_visible("#sign-in") and page.is_hidden("#board")
    page.evaluate("document.getElementById('updated').textContent = 'held'")
    for route in held:
        route.continue_()
    page.unroute("**/v1/dashboard/deployments/*/series*")
    # The late refresh writes its time last; what it does after (the loop's step) runs before the next poll.
    page.wait_for_selector("#updated:not(:has-text('held'))", state="attached", timeout=WAIT_MS)
    assert page.is_visible("#sign-in") and page.is_hidden("#board")
    # A refused key's 401 is logged as a console error (expected); any other, such as a script error or a
    # Content-Security-Policy violation, fails the test.
    assert [e for e in page.console_errors if "401" not in e] == [], page.console_errors
