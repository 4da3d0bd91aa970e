"""GPU discovery: the driver's device names (as CuPy and nvidia-smi report them on real machines) mapped to the
compiler's targets, nvidia-smi's CSV parsed, and discovery through a stand-in nvidia-smi on PATH; on a machine
with neither CuPy nor nvidia-smi there is no GPU."""

from __future__ import annotations

import os
import stat

import pytest

from luminal.runtime.cuda import devices
from luminal.runtime.cuda.devices import Gpu, local_gpus, parse_nvidia_smi, target_for_device_name


@pytest.mark.parametrize(
    "name, target",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),  # SXM5
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA H100 NVL", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A100-PCIE-40GB", "a100"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        ("NVIDIA L4", "l4"),
        ("Tesla T4", "t4"),
        # Different chips whose names contain a target's: their figures are not the target's.
        ("NVIDIA L40S", None),
        ("NVIDIA A10G", None),
        ("NVIDIA A10", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA H800", None),
        ("NVIDIA GeForce RTX 4090", None),
        ("", None),
    ],
)
def test_device_names_map_to_targets(name, target):
    assert target_for_device_name(name) == target


def test_nvidia_smi_csv_is_parsed_in_device_order():
    text = "NVIDIA H100 80GB HBM3, 81559 MiB\nNVIDIA L40S, 46068 MiB\n\nTesla T4, [N/A]\n"
    assert parse_nvidia_smi(text) == [
        Gpu(0, "NVIDIA H100 80GB HBM3", "h100", 81559 * 2**20, cupy_sees=False),
        Gpu(1, "NVIDIA L40S", None, 46068 * 2**20, cupy_sees=False),  # kept with its name: it was found
        Gpu(2, "Tesla T4", "t4", None, cupy_sees=False),
    ]


def test_discovery_falls_back_to_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=name,memory.total" ] || exit 9\necho "NVIDIA L4, 23034 MiB"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(devices, "_from_cupy", lambda: None)  # as where CuPy is missing or reaches no driver
    assert local_gpus() == [Gpu(0, "NVIDIA L4", "l4", 23034 * 2**20, cupy_sees=False)]


def test_a_failing_nvidia_smi_means_no_gpu(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\n"
                   "exit 9\n")  # fmt: skip
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(devices, "_from_cupy", lambda: None)
    assert local_gpus() == []


def test_without_cupy_or_nvidia_smi_there_is_no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nvidia-smi
    monkeypatch.setattr(devices, "_from_cupy", lambda: None)
    assert local_gpus() == []
