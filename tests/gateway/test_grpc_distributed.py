"""The gRPC service on the distributed platform: Redis Streams queues and worker processes behind `luminal serve`,
as a gateway replica runs. Concurrent asyncio calls are answered each with its own rows and billed once each."""

import asyncio

import numpy as np
import tritonclient.grpc.aio as triton_aio

from tests.gateway.conftest import BOOTSTRAP_KEY, tiny_graph
from tests.gateway.grpc_serving import serving_tiny
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401

AUTH = {"authorization": f"Bearer {BOOTSTRAP_KEY}"}


def _reference(rows: np.ndarray) -> np.ndarray:
    weights = tiny_graph().weight_data  # what the deployed model holds
    logits = rows @ weights["w"] + weights["b"]
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_concurrent_calls_through_redis_and_worker_processes(tmp_path, model_bytes, redis_namespace):  # noqa: F811
    env = {"LUMINAL_QUEUE_URL": REDIS_URL, "LUMINAL_QUEUE_NAMESPACE": redis_namespace}
    with serving_tiny(tmp_path / "data", model_bytes, LUMINAL_WORKER_BACKEND="process", **env) as (rest, address):
        batches = [np.full((2, 4), k / 10, np.float32) for k in range(16)]

        async def run() -> list:
            async with triton_aio.InferenceServerClient(address) as client:
                calls = []
                for k, rows in enumerate(batches):
                    x = triton_aio.InferInput("x", [2, 4], "FP32")
                    x.set_data_from_numpy(rows)
                    calls.append(client.infer("tiny", [x], headers=AUTH, request_id=f"r{k}"))
                return await asyncio.gather(*calls)

        answers = asyncio.run(run())
        for k, (rows, answer) in enumerate(zip(batches, answers, strict=True)):
            assert answer.get_response().id == f"r{k}"
            np.testing.assert_allclose(answer.as_numpy("probs"), _reference(rows), rtol=1e-5, atol=1e-6)
        records = rest.client().get("/v1/usage/records").json()
        billed = [i for record in records for i in record["request_ids"]]
        assert len(billed) == len(set(billed)) == len(batches)  # each call in exactly one usage record
