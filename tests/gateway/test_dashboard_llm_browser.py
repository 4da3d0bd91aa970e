"""The dashboard of a language model, in Chromium: a deployed tiny Llama answers completions (and refuses one
asking for more than its context), the sampler closes an interval, and the page shows the sequences, the tokens/s
and time-to-first-token charts and the refusal in the failures list; the series API counts the tokens generated.
Screenshot in the test's tmp dir, its path printed (`pytest -rA`)."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.dashboard_browser import WAIT_MS, chromium_page, screenshot, sign_in
from tests.gateway.openai_world import start_world

MODEL = "tiny-llama"
SEQUENCES, TOKENS = 3, 4


@pytest.fixture
def world(tmp_path):
    world, stop = start_world(tmp_path / "world", kinds=("llama",))
    yield world
    stop()


@pytest.fixture
def browser_page():
    with chromium_page() as page:
        yield page


@pytest.mark.needs("chromium")
def test_a_language_models_dashboard(world, browser_page, tmp_path, record_property):
    sampler = world.app.state.platform.dashboard_sampler
    sampler.sample()  # an interval starts here; the gateway's own sampling may split it, never lose any of it
    client = world.client()
    for _ in range(SEQUENCES):
        extra = {"ignore_eos": True}
        done = client.completions.create(model=MODEL, prompt="the quick", max_tokens=TOKENS, extra_body=extra)
        assert done.usage.completion_tokens == TOKENS
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="the quick", max_tokens=10_000)
    sampler.sample()

    http = httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}, timeout=30)
    [deployment] = http.get("/v1/dashboard/summary").json()["deployments"]
    assert deployment["kind"] == "llm"
    points = http.get(f"/v1/dashboard/deployments/{deployment['id']}/series").json()["points"]
    assert sum(p["sequences"] or 0 for p in points) == SEQUENCES and sum(p["errors"] for p in points) == 1
    assert sum((p["tokens_per_s"] or 0) * p["seconds"] for p in points) == pytest.approx(SEQUENCES * TOKENS)
    assert any(p["ttft_p50_ms"] for p in points)

    page = browser_page
    sign_in(page, world.url)
    charts = f".deployment-charts[data-deployment-id='{deployment['id']}']"
    page.wait_for_selector(f"{charts} h3:has-text('{SEQUENCES} sequences, 1 error')", timeout=WAIT_MS)
    names = [f.get_attribute("data-chart") for f in page.query_selector_all(f"{charts} figure")]
    assert names == ["Sequences", "Errors", "Tokens", "Time to first token"]
    for name in ("Tokens", "Time to first token"):
        assert page.query_selector(f"{charts} figure[data-chart='{name}'] :is(polyline, circle)"), name
    [failure] = page.query_selector_all("#failures tbody tr")
    cells = [td.text_content() for td in failure.query_selector_all("td")]
    assert cells[1:4] == [f"{MODEL} v1", "400", "invalid"] and "maximum context length" in cells[4]
    screenshot(page, tmp_path / "dashboard-llm.png", record_property)
    assert page.console_errors == []
