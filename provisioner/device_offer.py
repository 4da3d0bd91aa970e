"""What a worker backend can run workers on: the CPU always, and the GPUs it found, by GPU type.

A deployment asks for a GPU type; one its backend cannot provide is never started on something else (a
"h100" deployment silently served by the CPU would be billed and timed as what it is not): the provisioner
leaves it without workers, the gateway shows it `unschedulable` with `refusal`'s reason and answers its
requests 503.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.runtime.cuda.devices import Gpu, local_gpus

CPU = "cpu"


@dataclass(frozen=True)
class DeviceOffer:
    gpus: tuple[Gpu, ...] = ()
    # Who found them, as a refusal names it: where an operator would look to add the missing GPU.
    provider: str = "this platform's local provisioner"
    # GPU types a remote backend places workers on (a cluster's labelled nodes, a cloud's instance types): found
    # by no probe here, so each counts as offered.
    remote_types: frozenset[str] = frozenset()

    @property
    def types(self) -> frozenset[str]:
        """The GPU types (compiler targets) workers can be started on; "cpu" always. A GPU counts only when CuPy
        sees it: a worker there could not load its program otherwise."""
        local = (g.target for g in self.gpus if g.target is not None and g.cupy_sees)
        return frozenset({CPU, *local, *self.remote_types})

    def refusal(self, gpu_type: str) -> str | None:
        """Why no worker can run a deployment of `gpu_type`; None when one can."""
        if gpu_type in self.types:
            return None
        return f"no worker can provide {gpu_type}: {self.provider} found {self._found()}"

    def gpu_index(self, gpu_type: str) -> int | None:
        """The device ordinal of the first GPU of `gpu_type`; None for the CPU (or a type not offered)."""
        return next((g.index for g in self.gpus if g.target == gpu_type), None)

    def default_device_only(self) -> DeviceOffer:
        """The offer of a process that cannot choose its GPU: the runtime there uses device 0, so only its type
        is honest to offer (thread workers share the gateway's process and its current device)."""
        return DeviceOffer(tuple(g for g in self.gpus if g.index == 0), self.provider)

    def _found(self) -> str:
        if self.remote_types:
            return "only " + ", ".join(sorted(self.types))
        if not self.gpus:
            return "no GPU"
        return ", ".join(f"{g.name} ({_why_not(g)})" for g in self.gpus)


def _why_not(gpu: Gpu) -> str:
    if gpu.target is None:
        return "no compiler target"
    if not gpu.cupy_sees:
        return f"{gpu.target}, but CuPy cannot reach it: install cupy-cuda12x or cupy-cuda13x as the driver allows"
    return gpu.target


def local_offer() -> DeviceOffer:
    """This machine's CPU and the GPUs CuPy (or nvidia-smi) reports."""
    return DeviceOffer(tuple(local_gpus()))
