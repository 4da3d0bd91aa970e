"""bench/llm_http.py at its --small size, both shapes (the embedded default, and a worker process on the Redis at
LUMINAL_TEST_REDIS_URL), so the benchmark cannot rot: every row streams, with a first token and positive rates."""

import sys
from pathlib import Path

from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from llm_http import main  # noqa: E402


def test_the_http_bench_runs_small_through_both_shapes(redis_namespace, capsys):  # noqa: F811 (Redis reachable)
    shapes = main(["--small", "--redis", REDIS_URL])
    assert set(shapes) == {"embedded (thread worker, memory)", "distributed (worker process, Redis)"}
    for rows in shapes.values():
        assert set(rows) == {1, 4}
        for ttft, itl, rate in rows.values():
            assert ttft > 0 and itl > 0 and rate > 0
    printed = capsys.readouterr().out
    assert "4 streams / 1 stream" in printed and "load average" in printed
