"""The anchor of `bench/serve.py`: a plain FastAPI endpoint that decodes the same tensors (JSON, or Triton's
binary extension as the platform takes it), calls the same compiled program directly and answers JSON — no
auth, no database, no queue, no batching, no metrics. The platform's latency minus this one's is the overhead
the platform adds.

`python bench/plain_server.py MODEL.lgraph PORT`
"""

from __future__ import annotations

import asyncio
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import uvicorn
from fastapi import FastAPI, Request

import luminal as lm

DTYPES = {"FP32": np.dtype("<f4"), "INT64": np.dtype("<i8"), "INT32": np.dtype("<i4")}


def decode(body: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """The request's tensors: from JSON `data`, or, with a binary header length, from the raw bytes after the
    JSON header, in the order the inputs are named."""
    if header_length is None:
        doc = json.loads(body)
        return {t["name"]: np.asarray(t["data"], DTYPES[t["datatype"]]).reshape(t["shape"]) for t in doc["inputs"]}
    split = int(header_length)
    doc, offset, inputs = json.loads(body[:split]), split, {}
    for t in doc["inputs"]:
        size, dtype = t["parameters"]["binary_data_size"], DTYPES[t["datatype"]]
        inputs[t["name"]] = np.frombuffer(body, dtype, size // dtype.itemsize, offset).reshape(t["shape"])
        offset += size
    return inputs


def build_app(path: str) -> FastAPI:
    program = lm.compile(lm.load(path), target="cpu")
    # One thread runs the program: a compiled program runs one call at a time, and one thread keeps one OpenMP team.
    runner = ThreadPoolExecutor(max_workers=1)
    app = FastAPI()

    @app.post("/infer")
    async def infer(request: Request) -> dict:
        inputs = decode(await request.body(), request.headers.get("inference-header-content-length"))
        outputs = await asyncio.get_running_loop().run_in_executor(runner, program.run, inputs)
        return {
            "outputs": [
                {"name": n, "datatype": "FP32", "shape": list(a.shape), "data": a.reshape(-1).tolist()}
                for n, a in outputs.items()
            ]
        }

    @app.get("/live")
    def live() -> dict:
        return {"live": True}

    return app


if __name__ == "__main__":
    uvicorn.run(build_app(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
