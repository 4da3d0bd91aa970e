"""The body of `POST /openai/v1/embeddings`, as OpenAI documents it, plus `truncate` (this platform's field, sent
by the `openai` client as extra_body): every bad value is a 400 naming its parameter."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

# OpenAI's bound on the inputs of one request; each input is its own inference request in the batcher.
MAX_INPUTS = 2048
TokenIds = list[StrictInt]


class EmbeddingCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")  # user, ...: change nothing here
    model: StrictStr = Field(min_length=1, max_length=128)
    input: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    encoding_format: Literal["float", "base64"] = "float"  # base64: little-endian float32, as OpenAI sends it
    dimensions: Annotated[StrictInt, Field(ge=1)] | None = None
    # Cut an input longer than the model's max_seq_length to it (text keeps its closing special token), where
    # OpenAI refuses it: sentence-transformers' encode() truncates so, silently.
    truncate: StrictBool = False

    @model_validator(mode="after")
    def _inputs_present(self) -> EmbeddingCreate:
        inputs = self.inputs()
        if not inputs:
            raise ValueError("input must not be an empty list")
        if len(inputs) > MAX_INPUTS:
            raise ValueError(f"input lists {len(inputs)} items; at most {MAX_INPUTS} are embedded per request")
        empty = next((k for k, one in enumerate(inputs) if len(one) == 0), None)
        if empty is not None:
            raise ValueError(f"input[{empty}] is empty" if len(inputs) > 1 else "input is empty")
        return self

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs as a list: texts, or token-id sequences."""
        given = self.input
        if isinstance(given, str) or (given and isinstance(given[0], int)):
            return [given]  # one text, or one sequence of token ids
        return given
