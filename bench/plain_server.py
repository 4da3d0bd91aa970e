"""The anchor of `bench/serve.py`: a plain FastAPI endpoint that decodes the same JSON tensors, calls the same
compiled program directly and answers JSON — no auth, no database, no queue, no batching, no metrics. The
platform's latency minus this one's is the overhead the platform adds.

`python bench/plain_server.py MODEL.lgraph PORT`
"""

from __future__ import annotations

import sys

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool

import luminal as lm


def build_app(path: str) -> FastAPI:
    program = lm.compile(lm.load(path), target="cpu")
    app = FastAPI()

    @app.post("/infer")
    async def infer(request: Request) -> dict:
        doc = await request.json()
        inputs = {t["name"]: np.asarray(t["data"], np.float32).reshape(t["shape"]) for t in doc["inputs"]}
        outputs = await run_in_threadpool(program.run, inputs)
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
