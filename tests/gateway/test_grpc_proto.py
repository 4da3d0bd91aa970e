"""The committed gRPC descriptor is current with its .proto, and its messages and calls are the ones
tritonclient.grpc sends and expects, field for field (a mismatch would garble tensors silently on the wire)."""

from google.protobuf import descriptor_pb2
from tritonclient.grpc import service_pb2 as triton

from luminal.gateway.oip_grpc import messages
from luminal.gateway.oip_grpc.regenerate import COMPILED, compiled_descriptor


def test_the_committed_descriptor_is_compiled_from_the_current_proto():
    fresh = descriptor_pb2.FileDescriptorSet.FromString(compiled_descriptor())
    committed = descriptor_pb2.FileDescriptorSet.FromString(COMPILED.read_bytes())
    assert fresh == committed, "run `python -m luminal.gateway.oip_grpc.regenerate` and commit grpc_service.binpb"


def _fields(message) -> dict[str, tuple]:
    return {
        f.name: (f.number, f.type, f.is_repeated, f.message_type.full_name if f.message_type else None)
        for f in message.fields
    }


def _with_nested(message):
    yield message
    for nested in message.nested_types:
        yield from _with_nested(nested)


def test_every_message_matches_tritonclients_field_for_field():
    ours = messages.ModelInferRequest.DESCRIPTOR.file
    checked = 0
    for top in ours.message_types_by_name.values():
        for message in _with_nested(top):
            theirs = triton.DESCRIPTOR.pool.FindMessageTypeByName(message.full_name)
            assert _fields(message) == _fields(theirs), message.full_name
            checked += 1
    assert checked >= 20  # every message, its nested tensors and parameter maps


def test_every_call_matches_tritonclients_types_and_streaming():
    ours = messages.ModelInferRequest.DESCRIPTOR.file.services_by_name["GRPCInferenceService"]
    theirs = triton.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert ours.full_name == theirs.full_name == "inference.GRPCInferenceService"
    for method in ours.methods:
        twin = theirs.methods_by_name[method.name]
        assert method.input_type.full_name == twin.input_type.full_name, method.name
        assert method.output_type.full_name == twin.output_type.full_name, method.name
        assert (method.client_streaming, method.server_streaming) == (twin.client_streaming, twin.server_streaming)
    assert {"ModelInfer", "ModelStreamInfer", "ModelMetadata", "ServerLive"} <= set(ours.methods_by_name)
