"""A canary on the embedded default platform (SQLite, in-memory queues, a local worker): two ready versions of
one model, 2,000 concurrent requests under a 90/10 split answered within a few percent of it, each by a ready
version that the answer names (its output is that version's), then a rollback that sends everything back to the
split before; gRPC's answers name their version too; the usage report bills each version exactly the requests
it answered.

The client calls the app in process (httpx's ASGI transport, on the app's own event loop, lifespan run here):
no sockets or HTTP parsing, so 2,000 requests take a few seconds even on a loaded machine."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import tritonclient.grpc.aio as triton_aio

from luminal.gateway.app import create_app
from luminal.graph_file import graph_to_bytes
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, tiny_graph
from tests.gateway.model_versions import BODY, second_version_bytes
from tests.gateway.threaded_server import free_port

REQUESTS = 2000
CONCURRENCY = 32  # enough in flight for the batcher to fill batches


async def deploy(client: httpx.AsyncClient, version: int, data: bytes) -> None:
    assert (await client.post("/v1/models", params={"name": "tiny"}, content=data)).status_code == 201
    deployment = (await client.post("/v1/deployments", json={"model": "tiny", "version": version})).json()
    for _ in range(1200):  # a compile of the tiny model takes about a second; two minutes at most
        deployment = (await client.get(f"/v1/deployments/{deployment['id']}")).json()
        if deployment["status"] != "compiling":
            break
        await asyncio.sleep(0.1)
    assert deployment["status"] == "ready", deployment


async def answers(client: httpx.AsyncClient, count: int, path: str = "/v2/models/tiny/infer") -> list[tuple]:
    """`count` inferences, `CONCURRENCY` at a time: each answer's version and output."""
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one() -> tuple[str, tuple[float, ...]]:
        async with limit:
            r = await client.post(path, json=BODY)
        assert r.status_code == 200, r.text
        return r.json()["model_version"], tuple(r.json()["outputs"][0]["data"])

    return await asyncio.gather(*(one() for _ in range(count)))


async def grpc_answers(address: str, count: int) -> list[tuple]:
    """`count` unversioned gRPC inferences at once (tritonclient's asyncio client): each answer's model_version
    and output."""
    x = triton_aio.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array([BODY["inputs"][0]["data"]], np.float32))
    auth = {"authorization": f"Bearer {BOOTSTRAP_KEY}"}
    async with triton_aio.InferenceServerClient(address) as client:
        results = await asyncio.gather(*(client.infer("tiny", [x], headers=auth) for _ in range(count)))
    return [(r.get_response().model_version, tuple(r.as_numpy("probs").ravel().tolist())) for r in results]


async def billed_requests_per_version(client: httpx.AsyncClient) -> dict[int, int]:
    report = (await client.get("/v1/usage", params={"since": "0", "by": "day"})).json()
    billed: Counter[int] = Counter()
    for row in report["rows"]:
        billed[row["version"]] += row["requests"]
    return dict(billed)


async def canary_then_rollback(settings: Settings) -> None:
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers, timeout=60) as client,
    ):
        await deploy(client, 1, graph_to_bytes(tiny_graph()))
        await deploy(client, 2, second_version_bytes())
        outputs = {}
        for version in ("1", "2"):  # each version answers once by its number: its output
            [(answered, outputs[version])] = await answers(client, 1, f"/v2/models/tiny/versions/{version}/infer")
            assert answered == version
        assert (await client.put("/v1/models/tiny/traffic", json={"split": {"1": 100}})).status_code == 200
        assert (await client.put("/v1/models/tiny/traffic", json={"split": {"1": 90, "2": 10}})).status_code == 200

        canary = await answers(client, REQUESTS)
        canary += await grpc_answers(f"127.0.0.1:{settings.grpc_port}", 100)
        versions = Counter(v for v, _ in canary)
        assert set(versions) == {"1", "2"}  # every answer from one of the ready versions
        assert abs(versions["2"] / len(canary) - 0.10) <= 0.02, versions
        # ... and computed by the version it names.
        assert all(np.allclose(output, outputs[v], rtol=1e-6) for v, output in canary)

        rolled = await client.post("/v1/models/tiny/traffic/rollback")
        assert rolled.status_code == 200 and rolled.json()["split"] == {"1": 100}
        after = await answers(client, 200)
        assert Counter(v for v, _ in after) == {"1": 200}

        # Billed per version: the answers it gave, counting the one by its number before the split.
        billed = await billed_requests_per_version(client)
        assert billed == {1: 1 + versions["1"] + 200, 2: 1 + versions["2"]}


def test_a_90_10_canary_then_a_rollback(tmp_path: Path):
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path / 'meta.db'}",
        bootstrap_key=BOOTSTRAP_KEY,
        compile_runner=COMPILE_RUNNER,
        grpc_port=free_port(),
    )
    asyncio.run(canary_then_rollback(settings))
