"""Bodies of the asynchronous predictions API: `PredictionCreate` is what a client sends to `/v1/predictions`,
`PredictionPublic` what `GET /v1/predictions/{id}` answers and what a webhook receives."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from luminal.gateway.schemas import MODEL_NAME_PATTERN
from luminal.gateway.webhooks import DEFAULT_EVENTS, EVENTS, check_webhook_url
from luminal.store.tables import Prediction

MAX_TENSORS = 256  # far above any model's inputs or outputs; keeps a hostile list from being walked for long


class PredictionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently ignored

    model: str = Field(pattern=MODEL_NAME_PATTERN)
    version: int | None = Field(default=None, ge=1, le=10**9, description="the model version; the newest if omitted")
    # OIP input tensors exactly as in an infer request's JSON ({"name", "datatype", "shape", "data"}); the
    # tensor codec checks them against the model's signature.
    inputs: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_TENSORS)
    outputs: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_TENSORS)
    # Checked by `checked_webhook` (not pydantic's HttpUrl), so the 400 names the rule the URL breaks.
    webhook: str | None = Field(default=None, description="http(s) URL that receives the finished prediction")
    # As Replicate's: which events are sent to the webhook; omitted, only "completed".
    webhook_events_filter: list[Literal["start", "completed"]] | None = Field(
        default=None, min_length=1, max_length=len(EVENTS), description="webhook events: start, completed"
    )

    @model_validator(mode="after")
    def _events_need_a_webhook(self) -> PredictionCreate:
        if self.webhook_events_filter is not None and self.webhook is None:
            raise ValueError("webhook_events_filter is given without a webhook to send the events to")
        return self

    def infer_body(self) -> bytes:
        """The equivalent OIP infer request body, for the same decoding and checks as `/v2/.../infer`."""
        doc: dict[str, Any] = {"inputs": self.inputs}
        if self.outputs is not None:
            doc["outputs"] = self.outputs
        return json.dumps(doc).encode()

    def checked_webhook(self) -> str | None:
        return None if self.webhook is None else check_webhook_url(self.webhook)

    def webhook_events(self) -> frozenset[str]:
        return DEFAULT_EVENTS if self.webhook_events_filter is None else frozenset(self.webhook_events_filter)


class PredictionAccepted(BaseModel):
    """The 202 answer: where to poll."""

    id: str
    status: str
    url: str


class PredictionPublic(BaseModel):
    id: str
    model: str
    version: int
    status: str  # queued | running | succeeded | failed
    created_at: dt.datetime
    started_at: dt.datetime | None
    completed_at: dt.datetime | None
    error: str | None
    billed_seconds: float
    # The OIP response document ({"model_name", "model_version", "outputs": [...]}) once succeeded; lists leave
    # it out (null) to stay small: GET the prediction for it.
    output: dict[str, Any] | None
    webhook_status: str | None  # pending | delivered | failed; null without a webhook

    @classmethod
    def of(cls, row: Prediction, output_text: str | None) -> PredictionPublic:
        return cls(
            id=row.id,
            model=row.model,
            version=row.version,
            status=row.status,
            created_at=row.created_at,
            started_at=row.started_at,
            completed_at=row.completed_at,
            error=row.error,
            billed_seconds=row.billed_seconds,
            # parse_constant=str: a document stored before non-finite values were written as strings answers
            # with the same "NaN", "Infinity", "-Infinity" strings as a new one, never an unserializable float.
            output=None if output_text is None else json.loads(output_text, parse_constant=str),
            webhook_status=row.webhook_status,
        )


class PredictionPage(BaseModel):
    predictions: list[PredictionPublic]
    # Pass as `before` for the next (older) page; null on the last page.
    next_before: str | None
