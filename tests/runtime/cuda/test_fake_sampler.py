"""The device sampler (runtime/cuda/sampling.cu) run through the CuPy stand-in and the host shim, against its
reference (luminal/runtime/sampling.py): greedy identical, the same draws, draws that fit the exact tempered /
top-k / top-p distributions (chi-square), the bias and bitmask applied, the log-probabilities, and only token ids
(and asked-for log-probabilities) copied back. The source also compiles with nvcc."""

import subprocess

import numpy as np
import pytest

from luminal.runtime.cuda.sampler import SOURCE, CudaSampler, source
from luminal.runtime.sampling import RowSampling, choose_rows, pack_allowed
from tests.runtime.cuda import fake_cupy
from tests.runtime.cuda.fake_sampler import shim_sampler
from tests.runtime.sampling_cases import ROW, SETTINGS, VOCAB, assert_drawn_from, draws_of

pytestmark = pytest.mark.needs("g++")


@pytest.fixture(scope="module")
def sampler() -> CudaSampler:
    return shim_sampler(32)


def test_greedy_is_the_references_argmax_at_a_full_block():
    sampler = shim_sampler(256)  # the block size the runtime launches, over a vocabulary of several strides
    logits = np.random.default_rng(2).normal(size=(3, 1000)).astype(np.float32)
    logits[1, [10, 700]] = 9.0  # a tie: the lower id
    rows = [RowSampling(0.0), RowSampling(0.0), RowSampling(0.7, 0.9, 20, key=5, counter=1)]
    got = sampler.choose(fake_cupy.asarray(logits), rows)
    np.testing.assert_array_equal(got.tokens, choose_rows(logits, rows).tokens)
    assert got.tokens[0] == np.argmax(logits[0]) and got.tokens[1] == 10


@pytest.mark.parametrize("setting", SETTINGS)
def test_draws_are_the_references_and_fit_the_exact_distribution(sampler, setting):
    logits, rows = draws_of(setting)
    got = sampler.choose(fake_cupy.asarray(logits), rows).tokens
    want = choose_rows(logits, rows).tokens
    assert (got == want).mean() > 0.995  # float32 log may round apart by an ulp on a near tie of two draws
    assert_drawn_from(got, setting)


def test_bias_bitmask_and_logprobs(sampler):
    allowed = np.ones((3, VOCAB), bool)
    allowed[1] = False
    allowed[1, [3, 8]] = True
    bias = np.zeros((3, VOCAB), np.float32)
    bias[0, 5] = 50.0
    rows = [RowSampling(0.0, logprobs=3), RowSampling(1.0, key=9, counter=4, logprobs=0), RowSampling(0.5, key=1)]
    logits = np.repeat(ROW[None], 3, axis=0)
    got = sampler.choose(fake_cupy.asarray(logits), rows, bias=bias, allowed=pack_allowed(allowed))
    want = choose_rows(logits, rows, bias, pack_allowed(allowed))
    np.testing.assert_array_equal(got.tokens, want.tokens)
    assert got.tokens[0] == 5 and got.tokens[1] in (3, 8)
    np.testing.assert_allclose(got.logprobs[:2], want.logprobs[:2], atol=1e-5)
    np.testing.assert_array_equal(got.top_ids[0], want.top_ids[0])
    np.testing.assert_allclose(got.top_logprobs[0], want.top_logprobs[0], atol=1e-5)


def test_only_token_ids_come_back_unless_logprobs_are_asked(sampler):
    logits = fake_cupy.asarray(np.repeat(ROW[None], 4, axis=0))
    before_in, before_out = sampler.bytes_in, sampler.bytes_out
    sampler.choose(logits, [RowSampling(1.0, key=k) for k in range(4)])
    assert sampler.bytes_out - before_out == 4 * 8  # four int64 token ids
    assert sampler.bytes_in - before_in == 4 * (2 * 4 + 5 * 8) + 5 * 8  # each row's parameters, the dims
    sampler.choose(np.repeat(ROW[None], 4, axis=0), [RowSampling(0.0)] * 4)  # host logits are copied over
    assert sampler.bytes_in - before_in > 4 * VOCAB * 4


def test_mismatched_rows_are_refused_by_name(sampler):
    with pytest.raises(ValueError, match=r"1 rows of sampling parameters for logits rows \[0, 1\] of 2"):
        sampler.choose(fake_cupy.asarray(np.repeat(ROW[None], 2, axis=0)), [RowSampling(0.0)], logits_rows=[0, 1])
    with pytest.raises(ValueError, match=r"for logits rows \[2\] of 2"):
        sampler.choose(fake_cupy.asarray(np.repeat(ROW[None], 2, axis=0)), [RowSampling(0.0)], logits_rows=[2])


def test_rows_are_chosen_from_the_logits_rows_they_name(sampler):
    logits = np.random.default_rng(3).normal(size=(4, VOCAB)).astype(np.float32)
    rows = [RowSampling(0.0), RowSampling(1.0, key=2, counter=1, logprobs=2)]
    got = sampler.choose(fake_cupy.asarray(logits), rows, logits_rows=[3, 1])
    want = choose_rows(logits, rows, logits_rows=[3, 1])
    np.testing.assert_array_equal(got.tokens, want.tokens)
    assert got.tokens[0] == np.argmax(logits[3])
    np.testing.assert_array_equal(got.top_ids[1], want.top_ids[1])


@pytest.mark.needs("nvcc")
def test_nvcc_compiles_the_kernel(tmp_path):
    src = tmp_path / "sampling.cu"
    src.write_text(source())
    done = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "--resource-usage", "-o", str(tmp_path / "s.cubin"),
                           str(src)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "lm_sample_rows" in done.stdout + done.stderr and SOURCE.name == "sampling.cu"
