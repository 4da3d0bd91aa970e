"""Every JSON answer of the OIP and management APIs is strict JSON (what JavaScript's JSON.parse accepts) while
the model's outputs are NaN and infinite, on SQLite and PostgreSQL; the string forms round-trip through inputs,
stored predictions and webhook bodies."""

from __future__ import annotations

import json
import re
import time

import pytest

import luminal as lm
from luminal.gateway.webhooks import Delivery, WebhookSender
from luminal.graph_file import graph_to_bytes
from tests.gateway.conftest import deploy_and_wait, upload

NAMES = ["NaN", "Infinity", "-Infinity"]
ZERO_NEG_ONE = {"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [0.0, -1.0, 2.0]}


def strict_loads(text: bytes | str):
    """json.loads that refuses NaN, Infinity and -Infinity, as JavaScript's JSON.parse does."""

    def refuse(name: str):
        raise AssertionError(f"the answer holds the non-JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def non_finite_graph() -> lm.Graph:
    """log2(x) and 1/x: x = [0, -1, 2] gives [-inf, nan, 1] and [inf, -1, 0.5]."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", 1, 8), 3))
    x.log2().output("log2")
    x.reciprocal().output("recip")
    return g


@pytest.fixture
def deployed(server):
    c = server.client()
    assert upload(c, "nonfinite", graph_to_bytes(non_finite_graph())).status_code == 201
    assert deploy_and_wait(c, "nonfinite")["status"] == "ready"
    return server


def wait_finished(client, prediction_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while (doc := strict_loads(client.get(f"/v1/predictions/{prediction_id}").content))["status"] in (
        "queued",
        "running",
    ):
        assert time.monotonic() < deadline, f"prediction {prediction_id} did not finish"
        time.sleep(0.05)
    return doc


def output_data(doc: dict) -> dict[str, list]:
    return {o["name"]: o["data"] for o in doc["outputs"]}


def test_infer_writes_non_finite_outputs_as_strings(deployed):
    r = deployed.client().post("/v2/models/nonfinite/infer", json={"inputs": [ZERO_NEG_ONE]})
    assert r.status_code == 200, r.text
    assert output_data(strict_loads(r.content)) == {"log2": ["-Infinity", "NaN", 1.0], "recip": ["Infinity", -1.0, 0.5]}


def test_string_forms_round_trip_through_an_infer(deployed):
    x = {"name": "x", "shape": [1, 3], "datatype": "FP32", "data": NAMES}
    r = deployed.client().post("/v2/models/nonfinite/infer", content=json.dumps({"inputs": [x]}))
    assert r.status_code == 200, r.text
    # log2(nan) = nan, log2(inf) = inf, log2(-inf) = nan; 1/x of each
    assert output_data(strict_loads(r.content)) == {"log2": ["NaN", "Infinity", "NaN"], "recip": ["NaN", 0.0, -0.0]}


def test_predictions_store_and_deliver_the_string_forms(deployed, monkeypatch):
    bodies: list[bytes] = []

    async def capture(sender: WebhookSender, url: str, body: bytes, message_id: str) -> Delivery:  # nothing is sent
        bodies.append(body)
        return Delivery(True, 1)

    monkeypatch.setattr(WebhookSender, "send", capture)
    c = deployed.client()
    body = {"model": "nonfinite", "inputs": [ZERO_NEG_ONE], "webhook": "http://93.184.215.14/hook"}
    accepted = c.post("/v1/predictions", json=body)
    assert accepted.status_code == 202, accepted.text
    done = wait_finished(c, strict_loads(accepted.content)["id"])
    assert done["status"] == "succeeded", done
    assert output_data(done["output"])["log2"] == ["-Infinity", "NaN", 1.0]
    deadline = time.monotonic() + 30
    while not bodies:
        assert time.monotonic() < deadline, "no webhook was sent"
        time.sleep(0.05)
    assert output_data(strict_loads(bodies[0])["output"])["recip"] == ["Infinity", -1.0, 0.5]


def _path(template: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "1"), template)


def test_every_json_answer_is_strict(deployed):
    """Each GET route the OpenAPI document lists, plus the writing routes, answers strict JSON (errors too)."""
    c = deployed.client()
    answers = [
        c.post("/v2/models/nonfinite/infer", json={"inputs": [ZERO_NEG_ONE]}),
        c.post("/v2/models/nonfinite/versions/1/infer", json={"inputs": [ZERO_NEG_ONE]}),
        c.post("/v2/models/nonfinite/infer", json={"inputs": [ZERO_NEG_ONE]}, headers={"Prefer": "respond-async"}),
        c.post("/v2/models/nonfinite/infer", json={"inputs": [{**ZERO_NEG_ONE, "data": ["nan", 1, 2]}]}),
        c.post("/v1/keys", json={"name": "ci"}),
    ]
    prediction = c.post("/v1/predictions", json={"model": "nonfinite", "inputs": [ZERO_NEG_ONE]})
    answers.append(prediction)
    prediction_id = strict_loads(prediction.content)["id"]
    wait_finished(c, prediction_id)
    deployment_id = str(strict_loads(c.get("/v1/deployments").content)[0]["id"])
    values = {"name": "nonfinite", "version": "1", "deployment_id": deployment_id, "prediction_id": prediction_id}
    for template, operations in c.get("/openapi.json").json()["paths"].items():
        if "get" in operations:
            answers.append(c.get(_path(template, values)))
    json_answers = [a for a in answers if a.headers.get("content-type", "").startswith("application/json")]
    assert len(json_answers) >= 20
    for answer in json_answers:
        strict_loads(answer.content)
    assert output_data(c.get(f"/v1/predictions/{prediction_id}").json()["output"])["log2"][1] == "NaN"
