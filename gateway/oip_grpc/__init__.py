"""The Open Inference Protocol over gRPC: Triton's `inference.GRPCInferenceService` beside the REST API."""
