"""bench/embeddings.py at its --small size, so the benchmark cannot rot: every cell has positive rates and
latencies, and the side-by-side ratios are printed with the CPU and load average."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from embeddings import main  # noqa: E402


def test_the_embeddings_bench_runs_small(capsys):
    rows = main(["--small"])
    program = rows.pop("luminal compiled program in-process")
    assert set(rows) == {"luminal, HTTP (openai client)", "sentence-transformers in-process",
                         "sentence-transformers encode(batch)"}  # fmt: skip
    for cells in [*rows.values(), {4: (1, 1, 1), **program}]:
        assert set(cells) == {1, 4} and all(rate > 0 and 0 < p50 <= p90 for rate, p50, p90 in cells.values())
    printed = capsys.readouterr().out
    assert "luminal over HTTP / sentence-transformers in-process" in printed and "load average" in printed
