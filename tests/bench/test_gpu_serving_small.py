"""bench/gpu.py's LLM-serving row (bench/gpu_serving.py) set up and run against the CuPy stand-in at the --small
sizes: the engine's pools are device arrays, tokens come from the device sampler, its greedy tokens equal the
same graphs' on the CPU engine, and the per-step traffic it reports is the step's small inputs and the token ids,
far below the pools' size."""

import sys
from pathlib import Path

import pytest

import luminal as lm
from tests.runtime.cuda.conftest import fake_cublas_library  # noqa: F401 - a fixture the tests use
from tests.runtime.cuda.fake_sampler import use_sampler_shim
from tests.scheduler.device_model import on_fake_device

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from gpu_models import SMALL, as_numpy, random_weights, shapes_of  # noqa: E402
from gpu_serving import SERVE_STEP, SERVING, report, serve, serving_graphs, serving_model  # noqa: E402

from luminal.runtime.cuda.sampler import THREADS  # noqa: E402

pytestmark = [pytest.mark.needs("g++"), pytest.mark.usefixtures("fake_cublas_library")]
GREEDY = dict(temperature=0.0)


@pytest.fixture(scope="module")
def bound_graphs():
    graphs = serving_graphs(SMALL)
    weights = {k: as_numpy(v) for k, v in random_weights(shapes_of(graphs[SERVE_STEP]), "cpu", seed=0).items()}
    return {name: g.bind(weights) for name, g in graphs.items()}


def test_the_serving_row_runs_on_the_stand_in_and_equals_the_cpu_engine(bound_graphs):
    on_device = {name: on_fake_device(g).program.executable for name, g in bound_graphs.items()}
    use_sampler_shim(THREADS)
    model = serving_model(SMALL, bound_graphs, on_device)
    served = serve(model, SMALL, new_tokens=6, params=GREEDY)
    on_cpu = {name: lm.compile(g, "cpu").executable for name, g in bound_graphs.items()}
    want = serve(serving_model(SMALL, bound_graphs, on_cpu), SMALL, new_tokens=6, params=GREEDY)
    assert served.tokens == want.tokens and all(len(t) == 6 for t in served.tokens)
    # the first token came from the prefill, the second from the step of the round that finished it (not timed)
    assert served.steps == 4 and served.rows == 4 * SMALL.sequences
    rows = SMALL.sequences
    # ids, positions, slots (8 bytes a row each), a block table of one or two int64 a row (16-position blocks,
    # 17 to 21 cached positions), the sampling parameters (48 bytes a row) and the sampler's dims
    assert rows * (3 * 8 + 48) + 40 < served.bytes_in <= rows * (3 * 8 + 2 * 8 + 48) + 40
    assert served.bytes_out == 8 * rows and served.pool_bytes > 100 * served.bytes_in
    text = report(served, SMALL, step_ms=1.0)
    assert SERVING in text and "tokens/s" in text and "device->host 24 B" in text


def test_sampled_serving_repeats_its_seeded_draws(bound_graphs):
    on_device = {name: on_fake_device(g).program.executable for name, g in bound_graphs.items()}
    use_sampler_shim(THREADS)
    model = serving_model(SMALL, bound_graphs, on_device)
    first, again = (serve(model, SMALL, new_tokens=3) for _ in range(2))
    assert first.tokens == again.tokens  # seeded: the same draws
    assert all(len(t) == 3 and all(0 <= x < SMALL.llama.vocab_size for x in t) for t in first.tokens)
