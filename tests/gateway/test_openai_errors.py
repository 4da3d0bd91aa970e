"""What the platform raises becomes OpenAI's error shape with the status the `openai` client maps to its typed
exceptions; our own bugs are not dressed up as the caller's fault."""

import pytest

from luminal.compiler.artifact_json import ArtifactError
from luminal.gateway.errors import ApiError
from luminal.gateway.openai_errors import as_openai_error
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
