"""Reading request bodies with a size cap: refused with 413 as early as possible, never read past the cap."""

from __future__ import annotations

from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from luminal.gateway.errors import ApiError

ModelT = TypeVar("ModelT", bound=BaseModel)


def declared_length(request: Request) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"Content-Length {raw!r:.40} is not an integer") from None


async def read_capped_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes `max_bytes` (before reading it when the
    Content-Length already says so); for requests small enough to hold in memory."""
    length = declared_length(request)
    if length is not None and length > max_bytes:
        raise ApiError(413, f"the request body is {length} bytes, over the limit of {max_bytes}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(413, f"the request body exceeds the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_model(request: Request, model: type[ModelT], max_bytes: int) -> ModelT:
    """A JSON body of at most `max_bytes`, validated as `model` whatever the Content-Type says. A failure is the
    same 422 that a declared body parameter gives, and a too-large body the same 413 as everywhere else."""
    body = await read_capped_body(request, max_bytes)
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False, include_context=False)) from None


async def read_optional_json_model(request: Request, model: type[ModelT], max_bytes: int) -> ModelT:
    """As `read_json_model`, but an empty body is the model's defaults (`{}`): for bodies that are optional."""
    body = await read_capped_body(request, max_bytes)
    try:
        return model.model_validate_json(body if body.strip() else b"{}")
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False, include_context=False)) from None
