"""Language models from the command line: `luminal complete NAME "prompt"` and `luminal chat NAME` (interactive),
both streaming the text as the OpenAI-compatible API sends it; and the LLM package `luminal deploy FOLDER` builds
from a Hugging Face folder before uploading it."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from luminal.cli.client import ClientError
from luminal.cli.common import KeyOption, UrlOption, err, fail, out
from luminal.cli.config import resolve

MaxTokens = Annotated[int | None, typer.Option(help="most tokens to generate [default: the server's]")]
Temperature = Annotated[float, typer.Option(help="0 is greedy; higher samples more freely")]
Seed = Annotated[int | None, typer.Option(help="makes sampled text repeatable")]


@dataclass(frozen=True)
class LoraOptions:
    """`luminal deploy`'s --lora NAME=DIR (repeatable), --lora-slots and --lora-rank."""

    adapters: dict[str, Path]
    slots: int | None = None
    rank: int | None = None

    @classmethod
    def parse(cls, pairs: list[str], slots: int | None, rank: int | None) -> LoraOptions | None:
        """None when no option asks for LoRA; ValueError naming a malformed --lora."""
        adapters: dict[str, Path] = {}
        for pair in pairs:
            name, sep, folder = pair.partition("=")
            if not sep or not name or not folder:
                raise ValueError(f"--lora {pair!r}: expected NAME=ADAPTER_DIR")
            if name in adapters:
                raise ValueError(f"--lora: adapter name {name!r} is given twice")
            adapters[name] = Path(folder)
        if not adapters and slots is None:
            return None
        return cls(adapters, slots, rank)

    def build_options(self) -> dict:
        return {"lora": self.adapters, "lora_slots": self.slots, "lora_rank": self.rank}


Priority = Annotated[
    int | None, typer.Option(help="place in the model's waiting line: 1 most urgent .. 10 [default: the server's, 5]")
]
QueueTimeout = Annotated[
    float | None, typer.Option(help="seconds the request may wait for a place in the batch before a 504")
]


def llm_package_file(
    folder: Path, max_batch: int, quantize: str | None = None, lora: LoraOptions | None = None
) -> Path:
    """Build the folder's LLM package into a temporary file (removed when the command exits); quantize="int8"
    stores the projections' weights as Q8_0; `lora` builds the graphs with adapter stacks and packs the adapters
    (an adapter that does not fit fails the command, naming why)."""
    from luminal.llm_package import build_package, save_package

    tmp = Path(tempfile.mkdtemp(prefix="luminal-llm-"))
    atexit.register(shutil.rmtree, tmp, True)
    path = tmp / f"{folder.name or 'model'}.lpkg"
    with err.status(f"building the prefill and decode graphs of {folder}"):
        try:
            extra = {} if lora is None else lora.build_options()
            save_package(build_package(folder, max_batch=max_batch, quantize=quantize, **extra), path)
        except (OSError, ValueError, NotImplementedError) as e:  # no tokenizer, unknown model_type, missing weights
            fail(f"{folder}: {e}")
    return path


def stream_text(url: str | None, api_key: str | None, path: str, body: dict[str, Any]) -> Iterator[str]:
    """The text deltas of a streamed completion (`path` under /openai/v1); a server error raises ClientError."""
    conn = resolve(url, api_key)
    if not conn.api_key:
        raise ClientError("no API key: run `luminal login`, pass --api-key or set LUMINAL_API_KEY")
    headers = {"Authorization": f"Bearer {conn.api_key}"}
    try:
        with httpx.stream("POST", f"{conn.url.rstrip('/')}/openai/v1{path}", json={**body, "stream": True},
                          headers=headers, timeout=httpx.Timeout(60, read=600)) as response:  # fmt: skip
            if response.status_code >= 400:
                response.read()
                raise ClientError(_error_message(response.content))
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: ") :])
                if "error" in chunk:
                    raise ClientError(chunk["error"].get("message", "the server failed"))
                for choice in chunk.get("choices", []):
                    yield choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    except httpx.HTTPError as e:
        raise ClientError(f"cannot reach {conn.url}: {e}") from None


def _error_message(content: bytes) -> str:
    try:
        return json.loads(content)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return content.decode(errors="replace")[:200]


def _sampling(max_tokens: int | None, temperature: float, seed: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"temperature": temperature}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if seed is not None:
        body["seed"] = seed
    return body


def _scheduling(priority: int | None, queue_timeout: float | None) -> dict[str, Any]:
    """The platform's fields beside OpenAI's (what the `openai` client sends as extra_body); the server checks
    them and names a bad one."""
    given = {"priority": priority, "queue_timeout": queue_timeout}
    return {k: v for k, v in given.items() if v is not None}


def complete(
    name: Annotated[str, typer.Argument(help="the deployed language model")],
    prompt: Annotated[str, typer.Argument(help="the text to continue")],
    max_tokens: MaxTokens = 64,
    temperature: Temperature = 1.0,
    seed: Seed = None,
    priority: Priority = None,
    queue_timeout: QueueTimeout = None,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Print the model's continuation of PROMPT as it is generated."""
    body = {"model": name, "prompt": prompt, **_sampling(max_tokens, temperature, seed)}
    body |= _scheduling(priority, queue_timeout)
    try:
        for text in stream_text(url, api_key, "/completions", body):
            out.print(text, end="", highlight=False, markup=False, soft_wrap=True)
    except ClientError as e:
        fail(str(e))
    out.print()


def chat(
    name: Annotated[str, typer.Argument(help="the deployed language model")],
    system: Annotated[str | None, typer.Option(help="a system message to start with")] = None,
    max_tokens: MaxTokens = None,
    temperature: Temperature = 0.7,
    seed: Seed = None,
    priority: Priority = None,
    queue_timeout: QueueTimeout = None,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Talk with the model: each line you type is a user message; the reply streams back. Ctrl-D ends."""
    messages = [{"role": "system", "content": system}] if system else []
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            out.print()
            return
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line})
        body = {"model": name, "messages": messages, **_sampling(max_tokens, temperature, seed)}
        body |= _scheduling(priority, queue_timeout)
        reply = []
        try:
            for text in stream_text(url, api_key, "/chat/completions", body):
                reply.append(text)
                out.print(text, end="", highlight=False, markup=False, soft_wrap=True)
        except ClientError as e:
            fail(str(e))
        out.print()
        messages.append({"role": "assistant", "content": "".join(reply)})
