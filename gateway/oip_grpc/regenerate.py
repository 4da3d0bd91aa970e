"""Compiles grpc_service.proto to grpc_service.binpb: `python -m luminal.gateway.oip_grpc.regenerate`.

The compiled descriptor is committed, not built at install time, so serving needs only grpcio and protobuf, not
grpcio-tools' compiler; tests/gateway/test_grpc_proto.py fails while it is out of date. A descriptor rather than
protoc's generated `_pb2` module: that module registers `grpc_service.proto` and the `inference.*` messages in
protobuf's process-wide pool, where tritonclient.grpc registers its own copy of them, so the two could not be
imported into one process; oip_grpc/messages.py loads the descriptor into a pool of its own instead.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "grpc_service.proto"
COMPILED = HERE / "grpc_service.binpb"


def compiled_descriptor() -> bytes:
    """The serialized FileDescriptorSet grpcio-tools' protoc makes of the .proto now."""
    from grpc_tools import protoc  # a development tool: only regeneration and its test import it

    with tempfile.TemporaryDirectory() as out:
        target = Path(out) / COMPILED.name
        status = protoc.main(["protoc", f"-I{HERE}", f"--descriptor_set_out={target}", str(PROTO)])
        if status != 0:
            raise RuntimeError(f"protoc failed on {PROTO} (exit status {status})")
        return target.read_bytes()


def main() -> None:
    COMPILED.write_bytes(compiled_descriptor())
    print(f"wrote {COMPILED}", file=sys.stderr)


if __name__ == "__main__":
    main()
