"""Test-suite settings: property tests are deterministic under `make test` (the same examples every run,
so CI never flakes on a newly drawn case); `HYPOTHESIS_PROFILE=explore` draws fresh random examples.
`@pytest.mark.needs("g++")` names a prerequisite a test cannot run without (tests/prerequisites.py): missing, the
test skips saying how to get it, and under CI it fails. The modules in SLOW are marked `slow`: `make test-fast`
leaves them out, `make test` runs them."""

import os

# Before any OpenMP runtime loads (torch's or the compiled programs' libgomp read it once, when loaded): the test
# processes share two cores, and libgomp's default of spinning 300,000 iterations after each parallel region
# burned the core another worker needed (tests/scheduler/test_generation_engine.py, warm caches, load 3-7:
# 29-40 s of CPU by default, 16 s passive). Set by the caller, it is kept. Serving processes bound the spin
# themselves (scheduler/openmp_spin.py); that module's tests clear this variable.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from hypothesis import settings

from tests import prerequisites

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


# The modules that take most of the suite's time outside the op suite (`make test --durations` lists them): the
# platform under kills and load, model imports and generation, GPU programs built through the shims and nvcc.
SLOW = (
    "bench/test_gpu_bench_small.py", "bench/test_gpu_serving_small.py", "bench/test_metal_kernels_small.py",
    "bench/test_llm_http_small.py", "bench/test_embeddings_small.py", "bench/test_cpu_gemm_benches_small.py",
    "cli/test_cli.py", "cli/test_llm_cli.py", "cli/test_llm_quantize_cli.py", "cli/test_predict_compile.py",
    "cli/test_serve_killed_billing.py", "cli/test_traffic_cli.py",
    "compiler/cuda/test_attention_layout.py", "compiler/cuda/test_fuse_index.py",
    "compiler/cuda/test_half_activations.py", "compiler/cuda/test_nvcc.py", "compiler/cuda/test_paged_decode.py",
    "compiler/cuda/test_paged_decode_full_width.py", "compiler/cuda/test_paged_decode_phi3.py",
    "compiler/cuda/test_paged_chunk_window.py", "compiler/cuda/test_moe_step.py",
    "compiler/cuda/test_shim.py", "compiler/cuda/test_sibling_gemms.py", "compiler/cuda/test_stored_values.py",
    "compiler/metal/test_half_activations.py", "compiler/metal/test_msl.py", "compiler/metal/test_shim.py",
    "compiler/test_artifact.py", "compiler/test_compile_history.py", "compiler/test_cpu_runtime.py",
    "compiler/test_egraph.py", "compiler/test_matmul.py",
    "gateway/test_deployments_api.py", "gateway/test_inference_api.py", "gateway/test_openai_api.py",
    "gateway/test_traces.py", "gateway/test_llm_traces.py",
    "gateway/test_predictions.py", "gateway/test_scaling_api.py", "gateway/test_schemathesis.py",
    "gateway/test_openai_embeddings.py", "gateway/test_openai_structured.py", "gateway/test_openai_tools.py",
    "nn/test_generation.py", "nn/test_minilm.py", "nn/test_moe.py", "nn/test_paged_chunk.py", "nn/test_multi_lora.py",
    "onnx/test_dynamic_models.py", "onnx/test_node_cases.py", "onnx/test_quantized.py",
    "provisioner/test_ec2_workers.py", "provisioner/test_llm_remote_workers.py",
    "quantize/test_quantized_cuda.py", "quantize/test_quantized_models.py", "quantize/test_moe_int8.py",
    "quantize/test_w8a8_llama.py",
    "runtime/cuda/test_nvrtc.py",
    "scaleout/test_scaleout_kills.py",
    "scheduler/test_billing_under_kills.py", "scheduler/test_celery_compile.py", "scheduler/test_device_engine.py",
    "scheduler/test_generation_engine.py", "scheduler/test_generation_window.py", "scheduler/test_llm_worker.py",
    "gateway/test_llm_worker_processes.py", "gateway/test_llm_gateway_death.py", "test_embedding_package.py",
    "gateway/test_llm_process_disconnects.py", "gateway/test_llm_process_metrics.py",
    "gateway/test_live_adapters_processes.py", "scheduler/test_live_adapters.py",
    "gateway/test_grpc_inference.py", "gateway/test_grpc_distributed.py",
    "test_encoder_embedding_package.py", "gateway/test_encoder_embeddings.py", "gateway/test_oip_text.py",
    "scheduler/test_queues.py", "scheduler/test_llm_routing.py", "gateway/test_llm_routing_api.py",
    "torch/test_aten_ops.py", "torch/test_backend.py", "torch/test_export.py", "scheduler/test_lora_engine.py",
    "gateway/test_openai_lora.py", "quantize/test_lora_int8.py", "compiler/cuda/test_lora_step.py",
    "deploy/test_wheel_install.py", "gateway/test_traffic_api.py", "gateway/test_traffic_split_serving.py",
    "gateway/test_dashboard_browser.py", "gateway/test_dashboard_llm_browser.py",
)  # fmt: skip


def pytest_collection_modifyitems(config, items):
    root = config.rootpath / "tests"
    slow = {root / name for name in SLOW}
    for item in items:
        if item.path in slow:
            item.add_marker("slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of `make test-fast` (SLOW in tests/conftest.py)")
    names = ", ".join(prerequisites.PREREQUISITES)
    config.addinivalue_line("markers", f"needs(name): the test needs that prerequisite ({names})")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            prerequisites.require(name)
