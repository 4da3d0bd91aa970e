"""The gRPC server beside the REST one: started by the app's lifespan on the same event loop (grpc.aio), so both
protocols share one platform, its caches and its in-process queues, with no thread hop between them."""

from __future__ import annotations

import grpc

from luminal.gateway.oip_grpc.service import InferenceService, service_handler
from luminal.gateway.platform import Platform

# How long a stopping server lets calls in flight finish, as uvicorn gives open connections.
STOP_GRACE_S = 5.0


async def start_grpc_server(platform: Platform, host: str, port: int) -> tuple[grpc.aio.Server, int]:
    """Serving on `host:port` (port 0: any free port); returns the server and the port it bound."""
    limit = platform.settings.max_request_bytes  # the same largest request as REST's body limit
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", -1)])
    server.add_generic_rpc_handlers((service_handler(InferenceService(platform)),))
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on {host}:{port}")
    await server.start()
    return server, bound


async def stop_grpc_server(server: grpc.aio.Server) -> None:
    await server.stop(STOP_GRACE_S)
