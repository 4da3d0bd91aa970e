"""What worker backends offer: the CPU always, the GPUs found by type. A refused GPU type is named with what was
found; the thread backend offers only the default device its process can use; the process backend starts a
worker on the device of its GPU type (CUDA_VISIBLE_DEVICES) and tells it that type, so it bills it."""

from __future__ import annotations

import dataclasses

import pytest

from luminal.provisioner import local_processes
from luminal.provisioner.backends import ThreadWorkers
from luminal.provisioner.device_offer import DeviceOffer, local_offer
from luminal.provisioner.local_processes import LocalProcessWorkers
from luminal.runtime.cuda.devices import Gpu
from luminal.scheduler.registry import MemoryRegistry
from luminal.store.settings import Settings
from tests.provisioner.gateway_settings import assert_worker_reads_the_gateways_settings, gateway_settings
from tests.provisioner.test_provisioner import SPEC

H100 = Gpu(0, "NVIDIA H100 80GB HBM3", "h100")
L4 = Gpu(1, "NVIDIA L4", "l4")
L40S = Gpu(2, "NVIDIA L40S", None)


def test_the_cpu_is_always_offered_and_found_gpus_by_type():
    assert DeviceOffer().types == {"cpu"}
    assert DeviceOffer((H100, L4, L40S)).types == {"cpu", "h100", "l4"}  # an L40S has no target: not offered


def test_a_refusal_names_the_type_and_what_was_found():
    assert DeviceOffer().refusal("h100") == "no worker can provide h100: this platform's local provisioner found no GPU"
    refusal = DeviceOffer((L4, L40S)).refusal("a100")
    assert refusal == (
        "no worker can provide a100: this platform's local provisioner found NVIDIA L4 (l4), "
        "NVIDIA L40S (no compiler target)"
    )
    assert DeviceOffer((L4,)).refusal("l4") is None and DeviceOffer().refusal("cpu") is None


def test_a_gpu_only_nvidia_smi_reported_is_named_but_not_offered():
    seen_by_driver_only = Gpu(0, "NVIDIA H100 80GB HBM3", "h100", cupy_sees=False)
    offer = DeviceOffer((seen_by_driver_only,))
    assert offer.types == {"cpu"}
    assert offer.refusal("h100") == (
        "no worker can provide h100: this platform's local provisioner found NVIDIA H100 80GB HBM3 (h100, but CuPy "
        "cannot reach it: install cupy-cuda12x or cupy-cuda13x as the driver allows)"
    )


def test_gpu_index_and_the_default_device():
    offer = DeviceOffer((H100, L4))
    assert (offer.gpu_index("l4"), offer.gpu_index("h100"), offer.gpu_index("cpu")) == (1, 0, None)
    assert offer.default_device_only().types == {"cpu", "h100"}


def test_this_machine_offers_what_discovery_finds(monkeypatch):
    monkeypatch.setattr("luminal.provisioner.device_offer.local_gpus", lambda: [L4])
    assert local_offer() == DeviceOffer((L4,))


def test_thread_workers_refuse_a_type_they_lack():
    backend = ThreadWorkers(None, None, None, MemoryRegistry(), offer=DeviceOffer())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="deployment 1: no worker can provide h100"):
        backend.start(dataclasses.replace(SPEC, gpu_type="h100"))


class _Spawned:
    def __init__(self, command, env):
        self.command, self.env = command, env

    def poll(self):
        return None


@pytest.mark.parametrize("parent_visible, child_visible", [(None, "1"), ("4,6", "6")])
def test_worker_processes_run_on_a_gpu_of_their_type(tmp_path, monkeypatch, parent_visible, child_visible):
    spawned = []

    def spawn(command, env, **_):
        spawned.append(_Spawned(command, env))
        return spawned[-1]

    monkeypatch.setattr(local_processes.subprocess, "Popen", spawn)  # records the start instead of making it
    if parent_visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:  # this process was itself given GPUs 4 and 6: its ordinal 1 is GPU 6
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", parent_visible)
    settings = Settings(data_dir=tmp_path, queue_url="redis://127.0.0.1:6379/0")
    backend = LocalProcessWorkers(settings, MemoryRegistry(), offer=DeviceOffer((H100, L4)))
    backend.start(dataclasses.replace(SPEC, gpu_type="l4"))
    backend.start(SPEC)  # the CPU: no GPU chosen
    (l4, cpu) = spawned
    assert l4.command[-1] == "l4" and l4.env["CUDA_VISIBLE_DEVICES"] == child_visible
    assert cpu.command[-1] == "cpu" and cpu.env.get("CUDA_VISIBLE_DEVICES") == parent_visible
    with pytest.raises(ValueError, match="no worker can provide a100"):
        backend.start(dataclasses.replace(SPEC, gpu_type="a100"))


def test_worker_processes_run_with_the_gateways_settings(tmp_path, monkeypatch):
    """Reclaiming a dead worker's requests as the gateway says among them (not after the default 30 s)."""
    spawned = []

    def spawn(command, env, **_):
        spawned.append(_Spawned(command, env))
        return spawned[-1]

    monkeypatch.setattr(local_processes.subprocess, "Popen", spawn)
    settings = gateway_settings(Settings(data_dir=tmp_path, queue_url="redis://127.0.0.1:6379/0"))
    LocalProcessWorkers(settings, MemoryRegistry(), offer=DeviceOffer()).start(SPEC)
    (worker,) = spawned
    assert_worker_reads_the_gateways_settings(worker.env, monkeypatch)
