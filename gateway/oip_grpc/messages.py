"""The protocol's message classes (`messages.ModelInferRequest`, ...), built from the committed descriptor in a
descriptor pool of their own, so they coexist with tritonclient's classes of the same names in one process
(oip_grpc/regenerate.py says why there is no generated module)."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

COMPILED = Path(__file__).resolve().parent / "grpc_service.binpb"
PACKAGE = "inference"


def _load() -> dict[str, type]:
    files = descriptor_pb2.FileDescriptorSet.FromString(COMPILED.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    service_file = pool.FindFileByName("grpc_service.proto")
    return {name: message_factory.GetMessageClass(d) for name, d in service_file.message_types_by_name.items()}


_CLASSES = _load()
ServerLiveRequest = _CLASSES["ServerLiveRequest"]
ServerLiveResponse = _CLASSES["ServerLiveResponse"]
ServerReadyRequest = _CLASSES["ServerReadyRequest"]
ServerReadyResponse = _CLASSES["ServerReadyResponse"]
ModelReadyRequest = _CLASSES["ModelReadyRequest"]
ModelReadyResponse = _CLASSES["ModelReadyResponse"]
ServerMetadataRequest = _CLASSES["ServerMetadataRequest"]
ServerMetadataResponse = _CLASSES["ServerMetadataResponse"]
ModelMetadataRequest = _CLASSES["ModelMetadataRequest"]
ModelMetadataResponse = _CLASSES["ModelMetadataResponse"]
InferParameter = _CLASSES["InferParameter"]
InferTensorContents = _CLASSES["InferTensorContents"]
ModelInferRequest = _CLASSES["ModelInferRequest"]
ModelInferResponse = _CLASSES["ModelInferResponse"]
ModelStreamInferResponse = _CLASSES["ModelStreamInferResponse"]
