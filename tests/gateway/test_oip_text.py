"""Text through the Open Inference Protocol to an embedding deployment, as Triton takes string inputs: a BYTES
tensor `text` of sentences, sent by the real `tritonclient.http` client (binary BYTES) and as raw JSON, is tokenized
on the gateway with the deployment's tokenizer, and the answer equals transformers' pooled embeddings; a bad text
request is a 400 naming its problem."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import tritonclient.http as triton

from tests.encoder_folders import bert_folder, pooled, wordpiece_tokenizer
from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.encoder_gateway import deploy_folder, running_gateway

TEXTS = ["the man is eating food", "rain", "two men pushed carts through the woods fast", "deep learning"]
HEADERS = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oip-text")
    model = bert_folder(tmp / "tiny-bert")
    with running_gateway(tmp) as gateway:
        result = deploy_folder(gateway.url, tmp / "tiny-bert", "bert", "--pooling", "mean", "--normalize")
        assert result.exit_code == 0, result.output
        want = pooled(model, [e.ids for e in wordpiece_tokenizer().encode_batch(TEXTS)], "mean", True)
        yield gateway, want


@pytest.mark.parametrize("shape", [(len(TEXTS), 1), (len(TEXTS),)])
def test_tritonclient_sends_sentences_as_bytes(deployed, shape):
    gateway, want = deployed
    text = triton.InferInput("text", list(shape), "BYTES")
    text.set_data_from_numpy(np.array(TEXTS, dtype=object).reshape(shape))  # binary: 4-byte lengths, then bytes
    output = triton.InferRequestedOutput("sentence_embedding", binary_data=True)
    client = triton.InferenceServerClient(gateway.host_port)
    inputs = client.get_model_metadata("bert", headers=HEADERS)["inputs"]
    assert {"name": "text", "datatype": "BYTES", "shape": [-1, 1]} in inputs
    answer = client.infer("bert", [text], outputs=[output], headers=HEADERS)
    np.testing.assert_allclose(answer.as_numpy("sentence_embedding"), want, atol=1e-4)


def test_raw_json_text_gets_json_floats(deployed):
    gateway, want = deployed
    body = {"id": "q1", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}]}
    with gateway.client() as http:
        answer = http.post("/v2/models/bert/infer", json=body)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    (out,) = doc["outputs"]
    assert (doc["id"], out["name"], out["datatype"], out["shape"]) == ("q1", "sentence_embedding", "FP32", [4, 32])
    np.testing.assert_allclose(np.array(out["data"]).reshape(4, 32), want, atol=1e-4)


def _text(data, shape=None, **extra):
    entry = {"name": "text", "datatype": "BYTES", "shape": shape or [len(data)], "data": data}
    return {"inputs": [{**entry, **extra}]}


def _binary(elements: list[bytes], size: int | None = None, lengths=None) -> tuple[bytes, dict[str, str]]:
    """Triton's BYTES serialization of `elements` (each length-prefixed, the prefix `lengths` says if given)."""
    lengths = lengths or [len(e) for e in elements]
    blob = b"".join(struct.pack("<I", n) + e for n, e in zip(lengths, elements, strict=True))
    params = {"binary_data_size": len(blob) if size is None else size}
    entry = {"name": "text", "datatype": "BYTES", "shape": [len(elements)], "parameters": params}
    header = json.dumps({"inputs": [entry]}).encode()
    return header + blob, {"Inference-Header-Content-Length": str(len(header))}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"inputs": [{"name": "words", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}, "named 'text'"),
        ({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}] * 2}, "one BYTES input"),
        (_text(["a", "b"], shape=[1, 2]), "[N] or [N, 1]"),
        (_text(["a", "b"], shape=[3]), "holds 2 elements"),
        (_text([1, 2]), "must be strings"),
        (_text(["rain", ""]), "element 1 is empty"),
        (_text(["rain " * 20]), "maximum is 16"),
        ({**_text(["a"]), "parameters": {"truncate": "yes"}}, "truncate"),
        (_binary([b"rain", b"\xff\xfe"]), "element 1 is not UTF-8"),
        (_binary([b"rain", b"woods"], size=7), "binary_data_size"),
        (_binary([b"rain"], lengths=[10]), "element 0 says 10 bytes; 4 are left"),
    ],
)
def test_bad_text_requests_are_400s_naming_the_problem(deployed, body, named):
    gateway, _ = deployed
    with gateway.client() as http:
        if isinstance(body, tuple):
            answer = http.post("/v2/models/bert/infer", content=body[0], headers=body[1])
        else:
            answer = http.post("/v2/models/bert/infer", json=body)
    assert answer.status_code == 400 and named in answer.text, answer.text


def test_text_past_the_limit_is_cut_when_asked(deployed):
    gateway, _ = deployed
    with gateway.client() as http:
        answer = http.post("/v2/models/bert/infer", json={**_text(["rain " * 20]), "parameters": {"truncate": True}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["shape"] == [1, 32]
