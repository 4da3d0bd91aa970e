"""`make run`: the platform locally, the way a user meets it.

1. starts `luminal serve` (gateway, scheduler, batcher, workers, compile jobs; SQLite and in-memory queues)
   with its state in ./.luminal-run (LUMINAL_DATA_DIR chooses another place);
2. exports an example classifier to classifier.lgraph and deploys it with `luminal deploy`, on this machine's GPU
   where it has one CuPy can use (`--gpu h100` on an H100), on the CPU otherwise;
3. calls the endpoint with the real Triton client, one request and then 64 concurrent ones, so the scheduler
   batches them, and prints the answers;
4. prints `luminal usage` (billed GPU-seconds and cost by second) and keeps serving until Ctrl-C
   (`--exit` ends it here instead).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

import luminal as lm
from luminal.provisioner.device_offer import local_offer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quickstart import build_classifier  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LUMINAL = [sys.executable, "-m", "luminal.cli"]


def free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def wait_live(url: str, server: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"luminal serve exited with status {server.returncode}")
        try:
            if httpx.get(f"{url}/v2/health/live", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    sys.exit(f"luminal serve did not answer on {url} within {timeout:.0f} s")


def demo_gpu_type() -> str:
    """The GPU type `luminal serve`'s workers run on here: its default GPU's (they share its process, which uses
    device 0), else the CPU. The same offer the server makes, so the deployment is never unschedulable."""
    gpus = sorted(local_offer().default_device_only().types - {"cpu"})
    return gpus[0] if gpus else "cpu"


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def infer_once(host_port: str, key: str, rows: np.ndarray) -> np.ndarray:
    import tritonclient.http as triton

    client = triton.InferenceServerClient(host_port)
    x = triton.InferInput("x", list(rows.shape), "FP32")
    x.set_data_from_numpy(rows, binary_data=True)
    result = client.infer("classifier", [x], headers={"Authorization": f"Bearer {key}"})
    return result.as_numpy("probs")


def _interrupt(*_signal) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exit", action="store_true", help="stop the server after the usage report")
    args = parser.parse_args()
    # A SIGTERM (a supervisor, `timeout`) ends the demo like Ctrl-C does: the server it started is stopped too.
    signal.signal(signal.SIGTERM, _interrupt)
    data_dir = Path(os.environ.get("LUMINAL_DATA_DIR", ROOT / ".luminal-run"))
    key_file = data_dir / "demo-api-key"
    data_dir.mkdir(parents=True, exist_ok=True)
    if not key_file.exists():  # the first start's tenant key, kept so a second `make run` reuses the data
        key_file.write_text("lm_" + secrets.token_urlsafe(32))
        key_file.chmod(0o600)
    key = key_file.read_text().strip()
    port = free_port(int(os.environ.get("LUMINAL_PORT", "8000")))
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, LUMINAL_DATA_DIR=str(data_dir), LUMINAL_BOOTSTRAP_KEY=key)
    env |= {"LUMINAL_URL": url, "LUMINAL_API_KEY": key}

    step(f"luminal serve --port {port}   (state in {data_dir})")
    server = subprocess.Popen([*LUMINAL, "serve", "--port", str(port)], env=env)
    try:
        wait_live(url, server)
        model = data_dir / "classifier.lgraph"
        lm.save(build_classifier(), model)
        gpu = demo_gpu_type()
        step(f"luminal deploy {model.name} --gpu {gpu} --max-batch-size 32 --max-delay-ms 5")
        existing = httpx.get(f"{url}/v1/deployments", headers={"Authorization": f"Bearer {key}"}, timeout=10).json()
        if any(d["model"] == "classifier" and d["status"] == "ready" for d in existing):
            print("  already deployed by an earlier `make run` (its state is kept in the data dir)")
        else:
            deploy = [*LUMINAL, "deploy", str(model), "--name", "classifier", "--gpu", gpu]
            deploy += ["--max-batch-size", "32", "--max-delay-ms", "5", "--min-replicas", "1"]
            if subprocess.run(deploy, env=env).returncode != 0:
                sys.exit("the deploy failed")

        host_port = f"127.0.0.1:{port}"
        rng = np.random.default_rng(0)
        step("one request through tritonclient (binary tensors)")
        rows = rng.standard_normal((2, 32)).astype(np.float32)
        probs = infer_once(host_port, key, rows)
        for i, p in enumerate(probs):
            print(f"  row {i}: class {int(p.argmax())} with p={p.max():.3f}")

        step("64 concurrent requests (the scheduler batches them)")
        requests = [rng.standard_normal((1, 32)).astype(np.float32) for _ in range(64)]
        start = time.perf_counter()
        with ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(lambda r: infer_once(host_port, key, r), requests))
        elapsed = time.perf_counter() - start
        classes = [int(a[0].argmax()) for a in answers]
        print(f"  64 answers in {elapsed * 1e3:.0f} ms; predicted classes: {classes[:16]} ...")
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
        counts = {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith(("nv_inference_count{", "nv_inference_exec_count{")) and 'model="classifier"' in line
        }
        if counts.get("nv_inference_exec_count"):
            average = counts["nv_inference_count"] / counts["nv_inference_exec_count"]
            print(f"  {counts['nv_inference_count']:.0f} inferences in {counts['nv_inference_exec_count']:.0f} "
                  f"batch executions: {average:.1f} requests per batch on average")  # fmt: skip

        step("luminal usage --by second")
        subprocess.run([*LUMINAL, "usage", "--by", "second"], env=env | {"COLUMNS": "120"})
        if args.exit:
            return
        print(f"\nServing on {url} (Ctrl-C stops). Try:  LUMINAL_URL={url} LUMINAL_API_KEY=$(cat {key_file}) "
              "luminal deployments ls", flush=True)  # fmt: skip
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
