"""The gateway's errors as gRPC status codes: the same refusals as REST, each under the code a gRPC client expects
(Triton's choices where it has one), with REST's message."""

from __future__ import annotations

import logging

import grpc

from luminal.gateway.errors import ApiError
from luminal.gateway.tensor_codec import TensorError
from luminal.scheduler.programs import InvalidInput
from luminal.scheduler.queues.base import QueueFull
from luminal.store.errors import Conflict, NotFound, QuotaExceeded

log = logging.getLogger(__name__)

# REST's statuses (ApiError, a backend result's status) by their gRPC meaning.
BY_HTTP_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ALREADY_EXISTS,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
BY_EXCEPTION = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    Conflict: grpc.StatusCode.ALREADY_EXISTS,
    TensorError: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidInput: grpc.StatusCode.INVALID_ARGUMENT,
    QueueFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    QuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def grpc_status(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The code and message that answer `exc`; an error that is not the caller's is logged and answered INTERNAL."""
    if isinstance(exc, ApiError):
        code = BY_HTTP_STATUS.get(exc.status)
        if code is None:
            code = grpc.StatusCode.INTERNAL if exc.status >= 500 else grpc.StatusCode.INVALID_ARGUMENT
        return code, exc.message
    for cls in type(exc).__mro__:
        if cls in BY_EXCEPTION:
            return BY_EXCEPTION[cls], str(exc)
    log.error("unhandled error", exc_info=exc)
    return grpc.StatusCode.INTERNAL, "internal error"
