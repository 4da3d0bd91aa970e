"""The infer routes' fast path (gateway/infer_fast_path.py) answers what the FastAPI routes answer, byte for byte:
successes (JSON and binary, with and without a version) and every refusal; and it passes on what it does not
serve (a name the routes refuse as too long, other methods) to FastAPI."""

from __future__ import annotations

import json
import re

import numpy as np

from luminal.gateway import infer_fast_path
from luminal.gateway.schemas import MAX_MODEL_NAME_CHARS
from tests.gateway.conftest import BOOTSTRAP_KEY

KEY = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
X = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
JSON_BODY = json.dumps({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}]})
_HEADER = json.dumps(
    {
        "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": {"binary_data_size": 32}}],
        "outputs": [{"name": "probs", "parameters": {"binary_data": True}}],
    }
).encode()
BINARY = {"Inference-Header-Content-Length": str(len(_HEADER))}
LONG_NAME = "m" * (MAX_MODEL_NAME_CHARS + 1)

# (method, path, headers, body): what a client may send to the infer routes, good and bad.
CASES = [
    ("POST", "/v2/models/tiny/infer", KEY, JSON_BODY),
    ("POST", "/v2/models/tiny/versions/1/infer", KEY, JSON_BODY),
    ("POST", "/v2/models/tiny/infer", {**KEY, **BINARY}, _HEADER + X.tobytes()),
    ("POST", "/v2/models/tiny/infer", {}, JSON_BODY),
    ("POST", "/v2/models/tiny/infer", {"Authorization": "Bearer lm_wrong"}, JSON_BODY),
    ("POST", "/v2/models/tiny/infer", {"Authorization": "Basic abc"}, JSON_BODY),
    ("POST", "/v2/models/nope/infer", KEY, JSON_BODY),
    ("POST", "/v2/models/tiny/versions/2/infer", KEY, JSON_BODY),
    ("POST", "/v2/models/tiny/versions/x1/infer", KEY, JSON_BODY),
    ("POST", "/v2/models/tiny/infer", KEY, "{"),
    ("POST", "/v2/models/tiny/infer", KEY, JSON_BODY.replace('"x"', '"y"')),
    ("POST", "/v2/models/tiny/infer", {**KEY, "Inference-Header-Content-Length": "-1"}, _HEADER),
    ("POST", f"/v2/models/{LONG_NAME}/infer", KEY, JSON_BODY),
    ("GET", "/v2/models/tiny/infer", KEY, None),
]
# Headers that differ between any two answers: the request's id and the date.
_VARYING = {"luminal-request-id", "date"}


def _answers(server) -> list[tuple[int, dict[str, str], bytes]]:
    with server.client(key=None) as c:
        answers = []
        for method, path, headers, body in CASES:
            r = c.request(method, path, headers=headers, content=body)
            kept = {k: v for k, v in r.headers.items() if k not in _VARYING}
            answers.append((r.status_code, kept, r.content))
        return answers


def test_the_fast_path_answers_as_the_routes_do(deployed, monkeypatch):
    served = []
    real = infer_fast_path.answer_inference

    async def counted(request, name, version, tenant):
        served.append((name, version))
        return await real(request, name, version, tenant)

    monkeypatch.setattr(infer_fast_path, "answer_inference", counted)
    fast = _answers(deployed)
    # What the fast path served: every good path with a valid key, never the long name nor the GET.
    assert set(served) == {("nope", None), ("tiny", None), ("tiny", "1"), ("tiny", "2"), ("tiny", "x1")}
    assert [status for status, _, _ in fast] == [200, 200, 200, 401, 401, 401, 404, 404, 400, 400, 400, 400, 422, 405]

    served.clear()
    monkeypatch.setattr(infer_fast_path, "_INFER_PATH", re.compile(r"(?!)"))  # every request to FastAPI's routes
    routes = _answers(deployed)
    assert served == []
    for case, a, b in zip(CASES, fast, routes):
        assert a == b, case[:2]
