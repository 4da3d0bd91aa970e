"""`response_format` and `logit_bias` of completions and chat completions, checked when the request arrives (before
it is queued) and turned into the plain data `SamplingParams` carries.

`response_format` is OpenAI's: `{"type": "text"}` (the default, unconstrained), `{"type": "json_object"}` (any JSON
object) or `{"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}}` (JSON valid under
the schema). Every JSON answer is enforced token by token by the model's grammar (scheduler/generation/grammar.py),
whatever `strict` says; a schema keyword the grammar engine cannot enforce is a 400 naming it. `logit_bias` maps
token ids (as strings, as JSON keys are) to a bias in [-100, 100] added to their logits; at most 300 of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr
from starlette.concurrency import run_in_threadpool

from luminal.gateway.openai_errors import OpenAIError
from luminal.scheduler.generation.grammar import JSON_OBJECT, JSON_SCHEMA, grammar_request
from luminal.scheduler.generation.sampling import LOGIT_BIAS_RANGE, MAX_LOGIT_BIAS, SamplingParams
from luminal.scheduler.generation.tokenizer import TextCodec

MAX_SCHEMA_BYTES = 64 << 10  # a schema is compiled on the request's path: bounded like any other input


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: StrictStr = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")  # OpenAI's rule
    description: StrictStr | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")  # {}: any JSON value
    strict: StrictBool | None = None  # enforced either way: constrained decoding has no "best effort"


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_object"]


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]
Bias = Annotated[float, Field(ge=-LOGIT_BIAS_RANGE, le=LOGIT_BIAS_RANGE)]
LogitBias = Annotated[dict[StrictStr, Bias], Field(max_length=MAX_LOGIT_BIAS)]  # token id (a JSON key) -> bias


def _grammar_text(response_format: ResponseFormat | None) -> str | None:
    if response_format is None or isinstance(response_format, TextFormat):
        return None
    if isinstance(response_format, JsonObjectFormat):
        return grammar_request(JSON_OBJECT)
    text = grammar_request(JSON_SCHEMA, response_format.json_schema.schema_)
    if len(text) > MAX_SCHEMA_BYTES:
        raise OpenAIError(400, f"the schema is {len(text)} bytes; at most {MAX_SCHEMA_BYTES}", "response_format")
    return text


def _bias_pairs(logit_bias: dict[str, float] | None, vocab: int) -> tuple[tuple[int, float], ...]:
    pairs = []
    for key, bias in (logit_bias or {}).items():
        try:
            token = int(key)
        except ValueError:
            raise OpenAIError(400, f"logit_bias keys are token ids; got {key!r}", "logit_bias") from None
        if not 0 <= token < vocab:
            raise OpenAIError(400, f"logit_bias token {token} is outside the vocabulary (0..{vocab - 1})", "logit_bias")
        pairs.append((token, bias))
    return tuple(sorted(pairs))


async def shaped(params: SamplingParams, body: Any, codec: TextCodec, forced: str | None = None) -> SamplingParams:
    """`params` with the request's grammar and logit bias, both checked (a 400 naming what is wrong); `forced`: the
    grammar request of a forced tool call, which takes the place of the response_format's. The grammar is compiled
    here, off the event loop (a model's first one also indexes its vocabulary), so the engine's own compile of the
    same text is a cache hit. A grammar compiled before skips the thread hop: concurrent requests with one schema
    reach the engine together and share a prefill, as free ones do."""
    grammar = forced if forced is not None else _grammar_text(body.response_format)
    if grammar is not None and not codec.grammars.compiled(grammar):
        await run_in_threadpool(codec.grammars.check, grammar)  # GrammarError: a 400 (openai_errors.py)
    bias = _bias_pairs(body.logit_bias, codec.tokenizer.get_vocab_size())
    return replace(params, response_format=grammar, logit_bias=bias)
