"""A language model whose paged step and chunk programs run on the fake CUDA device (tests/runtime/cuda/
fake_cupy.py: host memory, kernels through the host shim), as a CUDA worker's engine runs them; its device
sampler runs through the shim too."""

from dataclasses import replace
from pathlib import Path

import luminal as lm
from luminal.llm_package import build_package, load_package, save_package
from luminal.runtime.cuda.executable import CudaExecutable
from luminal.runtime.cuda.sampler import THREADS
from luminal.scheduler.generation.language_model import LanguageModel, compile_package, load_language_model
from luminal.scheduler.programs import LoadedProgram
from tests.llm_folders import hf_folder
from tests.runtime.cuda import fake_cupy
from tests.runtime.cuda.fake_sampler import use_sampler_shim
from tests.runtime.cuda.test_fake_device import use_shim_for


def on_fake_device(graph: lm.Graph, target: str = "h100") -> LoadedProgram:
    """`graph` compiled for `target` and loaded by the CUDA runtime onto the fake device."""
    program = lm.compile(graph, target)
    use_shim_for(program)
    program._executable = CudaExecutable(fake_cupy, program.graph, program.kernels, program.source,
                                         graph.weight_data, plan=program.plan)  # fmt: skip
    return LoadedProgram(program)


def fake_device_model(cpu_model: LanguageModel, package: Path, chunked: bool = True) -> LanguageModel:
    """`cpu_model` with its paged step (and its chunk program, when `chunked`; else none: prompts prefilled in one
    go on the CPU) on the fake device. Engines made after this choose tokens with the device sampler, the shim
    running it at the runtime's block size."""
    graphs = load_package(package)
    step = on_fake_device(graphs.paged)
    chunk = on_fake_device(graphs.chunk) if chunked else None
    use_sampler_shim(THREADS)  # the next module the fake device loads: the sampler's
    return replace(cpu_model, step=step, chunk=chunk)


def cpu_llama(folder: Path):
    """A tiny random Llama in `folder`: (the transformers model, its package's path, the package compiled for the
    CPU and loaded)."""
    hf = hf_folder(folder, "llama")
    save_package(build_package(folder, max_batch=4, positions=64), folder / "m.lpkg")
    compile_package(folder / "m.lpkg", "cpu", folder / "m.llmprog")
    return hf, folder / "m.lpkg", load_language_model(folder / "m.llmprog")
