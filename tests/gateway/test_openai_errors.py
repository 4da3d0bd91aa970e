"""What the platform raises becomes OpenAI's error shape with the status the `openai` client maps to its typed
exceptions; our own bugs are not dressed up as the caller's fault."""

from types import SimpleNamespace

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient

from luminal.compiler.storage.artifact_json import ArtifactError
from luminal.gateway.errors import ApiError
from luminal.gateway.metrics import InferenceMetrics, ModelLabels
from luminal.gateway.openai_errors import OpenAIRoute, as_openai_error, note_model
from luminal.scheduler.generation.chat_template import ChatTemplateError
from luminal.scheduler.generation.engine import EngineBusy, PromptTooLong
from luminal.store.errors import NotFound


@pytest.mark.parametrize(
    "error, status, kind, code",
    [
        (ApiError(401, "invalid or revoked API key"), 401, "authentication_error", "invalid_api_key"),
        (NotFound("model 'x' not found"), 404, "invalid_request_error", "model_not_found"),
        (PromptTooLong("too long"), 400, "invalid_request_error", "context_length_exceeded"),
        (ChatTemplateError("no template"), 400, "invalid_request_error", None),
        (EngineBusy("busy"), 429, "rate_limit_error", None),
        (ArtifactError("compiled by compiler version 'x': recompile"), 503, "service_unavailable", None),
    ],
)
def test_mapped_errors(error, status, kind, code):
    mapped = as_openai_error(error)
    body = mapped.body()["error"]
    assert (mapped.status, body["type"], body["code"]) == (status, kind, code)
    assert str(error) in body["message"]


def test_a_bug_is_not_mapped():
    assert as_openai_error(KeyError("oops")) is None


def test_an_error_once_the_model_is_known_is_kept_among_its_recent_failures():
    router = APIRouter(route_class=OpenAIRoute)

    @router.post("/known")
    async def known(request: Request):
        note_model(request, ModelLabels.of("chat", 2, 7))
        raise EngineBusy("the waiting line is full")

    @router.post("/unknown")
    async def unknown():
        raise PromptTooLong("too long")  # no model named yet: nothing to file it under

    app = FastAPI()
    app.include_router(router)
    metrics = InferenceMetrics()
    app.state.platform = SimpleNamespace(metrics=metrics)
    with TestClient(app) as client:
        assert client.post("/known").status_code == 429 and client.post("/unknown").status_code == 400
    [failure] = metrics.failures.recent([7], limit=10)
    assert (failure.model, failure.version, failure.status, failure.reason) == ("chat", "2", 429, "rejected")
    assert failure.message == "the waiting line is full" and failure.request_id is None
    assert b"nv_inference_request_failure{" not in metrics.exposition()  # a log entry, not a Triton counter
