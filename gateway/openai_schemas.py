"""Request bodies of the OpenAI-compatible API: the fields OpenAI documents (and the sampling extensions vLLM
added: top_k, stop_token_ids, ignore_eos), checked here so a bad value is a 400 naming its parameter. Fields a
client may send that change nothing here (user, metadata, ...) are ignored; ones we cannot honour are refused."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator, model_validator

from luminal.gateway.openai_response_format import LogitBias, ResponseFormat
from luminal.gateway.openai_tool_schemas import NamedToolChoice, ToolCall, ToolChoice, Tools
from luminal.scheduler.work import effective_priority

MAX_STOPS = 4  # OpenAI's limit on stop sequences
MAX_STOP_TOKEN_IDS = 64
MAX_COMPLETION_LOGPROBS = 5  # OpenAI's limits: legacy completions list at most 5 alternatives, chat 20
MAX_CHAT_TOP_LOGPROBS = 20


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class SchedulingFields(BaseModel):
    """When a sequence joins the batch, given in extra_body (vLLM's `priority` field, numbered as inference
    requests number it): as inference requests, a waiting sequence is queued by priority level, then arrival."""

    model_config = ConfigDict(extra="ignore")
    # 1 most urgent .. 10; 0 the default level. (vLLM takes any integer, lower first; here, as for /v2 inference
    # requests, the range is 1..10 and 0 means the default level 5.)
    priority: StrictInt = 0
    # Seconds the sequence may wait for a place in the batch; capped by the platform's request_timeout_s, which
    # is also the wait allowed without it. Past it the request is answered 504 and never runs.
    queue_timeout: float | None = Field(default=None, gt=0)

    @field_validator("priority")
    @classmethod
    def _priority_in_range(cls, priority: int) -> int:
        effective_priority(priority)  # raises naming the range
        return priority


class SamplingFields(SchedulingFields):
    """What completions and chat completions share: sampling, streaming, and when the sequence joins the batch."""

    model_config = ConfigDict(extra="ignore")
    model: StrictStr = Field(min_length=1, max_length=128)
    temperature: float | None = Field(default=None, ge=0, le=2)  # None: 1.0, OpenAI's default
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: StrictInt | None = Field(default=None, ge=-1)  # -1 or 0: off
    seed: StrictInt | None = None
    stop: StrictStr | Annotated[list[StrictStr], Field(max_length=MAX_STOPS)] | None = None
    stop_token_ids: Annotated[list[StrictInt], Field(max_length=MAX_STOP_TOKEN_IDS)] | None = None
    ignore_eos: bool = False
    n: Literal[1] = 1  # one choice per request
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: Literal[0] | None = None  # penalties are not applied: only their neutral value is accepted
    frequency_penalty: Literal[0] | None = None
    response_format: ResponseFormat | None = None  # checked further (the schema compiled) by openai_response_format
    logit_bias: LogitBias | None = None

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def top_logprobs_count(self) -> int | None:
        """None: no logprobs; otherwise how many alternatives each token lists (per endpoint)."""
        return None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionCreate(SamplingFields):
    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    max_tokens: StrictInt | None = Field(default=16, ge=1)  # OpenAI's default for completions
    echo: Literal[False] = False
    logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_COMPLETION_LOGPROBS)  # top alternatives per token
    suffix: None = None

    @model_validator(mode="before")
    @classmethod
    def _no_tools(cls, body: Any) -> Any:
        named = [key for key in ("tools", "tool_choice") if isinstance(body, dict) and body.get(key) is not None]
        if named:
            raise ValueError(f"{named[0]} is only served by /chat/completions, not by the legacy /completions")
        return body

    @model_validator(mode="after")
    def _one_prompt(self) -> CompletionCreate:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str | list):
            if len(self.prompt) != 1:
                raise ValueError("one prompt per request (a list of prompts is not served)")
        return self

    def top_logprobs_count(self) -> int | None:
        return self.logprobs

    def prompt_value(self) -> str | list[int]:
        """The single prompt: text, or token ids."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        return prompt


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: StrictStr


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, ...: handed to the template as they are
    role: StrictStr = Field(min_length=1, max_length=64)
    content: StrictStr | list[ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant's calls (its content may then be null)
    tool_call_id: StrictStr | None = None  # a tool message answers this call

    @model_validator(mode="after")
    def _tool_fields_where_they_belong(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError('a message of role "tool" needs the tool_call_id of the call it answers')
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f'only assistant messages carry tool_calls, not one of role "{self.role}"')
        return self

    def for_template(self) -> dict[str, Any]:
        """As transformers passes a message to the template: the fields the caller set, the content parts joined
        into one string, and tool calls' arguments as objects (ToolCall.for_template). A null tool_calls or
        tool_call_id is left out, as if unset: a template may test whether the key is there ('tool_calls' in
        message), and a client that sends back an answer's message may write "tool_calls": null."""
        message = self.model_dump(exclude_unset=True)
        message.setdefault("content", None)
        for key in ("tool_calls", "tool_call_id"):
            if message.get(key, 0) is None:
                del message[key]
        if isinstance(self.content, list):
            message["content"] = "".join(part.text for part in self.content)
        if self.tool_calls is not None:
            message["tool_calls"] = [call.for_template() for call in self.tool_calls]
        return message


class ChatCompletionCreate(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: StrictInt | None = Field(default=None, ge=1)  # None: the rest of the context
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)  # the newer name of max_tokens
    add_generation_prompt: bool = True
    logprobs: bool | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_CHAT_TOP_LOGPROBS)
    tools: Tools | None = None
    tool_choice: ToolChoice | None = None  # None: "auto" with tools, "none" without
    parallel_tool_calls: bool = True

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatCompletionCreate:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs is only allowed when logprobs is true")
        return self

    @model_validator(mode="after")
    def _tools_consistent(self) -> ChatCompletionCreate:
        names = [tool.function.name for tool in self.tools or ()]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            repeated = ", ".join(map(repr, twice))
            raise ValueError(f"tools: function names must be unique; {repeated} appear more than once")
        if self.tool_choice not in (None, "none") and not names:
            raise ValueError("tool_choice needs tools")
        if isinstance(self.tool_choice, NamedToolChoice) and self.tool_choice.function.name not in names:
            raise ValueError(f"tool_choice names function {self.tool_choice.function.name!r}, which is not in tools")
        forced = self.chosen_tools() in ("required", "named")
        if forced and self.response_format is not None and self.response_format.type != "text":
            raise ValueError("a response_format cannot shape an answer that tool_choice makes a tool call")
        return self

    def offered_tools(self) -> list[dict[str, Any]] | None:
        """The tools as a chat template gets them: as the caller wrote them (transformers passes JSON-schema tools
        unchanged)."""
        return None if self.tools is None else [tool.model_dump(exclude_unset=True) for tool in self.tools]

    def chosen_tools(self) -> str:
        """tool_choice as a word: none, auto, required, or named (the function is tool_choice.function.name)."""
        if self.tool_choice is None:
            return "auto" if self.tools else "none"
        return "named" if isinstance(self.tool_choice, NamedToolChoice) else self.tool_choice

    def top_logprobs_count(self) -> int | None:
        """None: no logprobs; otherwise how many alternatives each token lists."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
