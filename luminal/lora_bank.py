"""The stacks a LoRA-adapted program reads (luminal/nn/lora.py): one [slots, in, rank] A and [slots, rank, out] B
array per adapted projection, an adapter per slot, slot 0 always zero (the base). Installing or removing an
adapter writes its slot in place, so a running program sees it at its next step without a recompile.

A slot is only written while no row reads it: an adapter is installed into a free slot, and a removed one is
first retired (its name refused from then on) and cleared only once its last sequence has ended (`release`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal.lora_adapter import LoraAdapter
from luminal.nn.lora import SLOT_INPUT, LoraLayout, factor_names


class LoraBank:
    """Adapters by name in slots 1.. of the stacks; `feed(names)` gives a batch's inputs."""

    def __init__(self, layout: LoraLayout, shapes: dict[str, tuple[int, int]], dtype: Any = np.float32) -> None:
        self.layout, self.shapes = layout, dict(shapes)
        self.slots: dict[str, int] = {}  # adapter name -> slot
        self.retiring: set[int] = set()  # slots of removed adapters whose sequences still run: not yet free
        # Counts installs; a slot's install number names its adapter in the prefix cache (cache_namespace), so
        # blocks an earlier adapter of that slot wrote are never shared with a later one.
        self.installs, self.install_of = 0, [0] * layout.slots
        self.arrays: dict[str, np.ndarray] = {}
        for path, (n_in, n_out) in self.shapes.items():
            a_name, b_name = factor_names(path)
            self.arrays[a_name] = np.zeros((layout.slots, n_in, layout.rank), dtype)  # the graph's stacks' dtype
            self.arrays[b_name] = np.zeros((layout.slots, layout.rank, n_out), dtype)

    def install(self, name: str, adapter: LoraAdapter) -> int:
        """Write `adapter` (checked by lora_adapter.check_adapter) into a free slot; its slot."""
        if name in self.slots:
            raise ValueError(f"LoRA adapter {name!r} is already loaded")
        taken = set(self.slots.values()) | self.retiring
        free = [s for s in range(1, self.layout.slots) if s not in taken]
        if not free:
            raise ValueError(f"LoRA: all {self.layout.slots - 1} adapter slots are taken; remove one first")
        slot = free[0]
        self._clear(slot)
        for path, (a, b) in adapter.factors.items():
            a_name, b_name = factor_names(path)
            rank = a.shape[1]
            self.arrays[a_name][slot, :, :rank] = a  # ranks below the layout's stay zero-padded
            self.arrays[b_name][slot, :rank, :] = b
        self.slots[name] = slot
        self.installs += 1
        self.install_of[slot] = self.installs
        return slot

    def cache_namespace(self, slot: int) -> bytes:
        """What keys a row's prefix-cache blocks apart by adapter: empty for the base (slot 0)."""
        return b"" if slot == 0 else f"lora:{self.install_of[slot]}".encode()

    def remove(self, name: str) -> None:
        """Retire and clear at once: for a bank no sequence reads."""
        self.release(self.retire(name))

    def retire(self, name: str) -> int:
        """Refuse `name` from now on; its slot, which stays taken until `release`."""
        slot = self.slots.pop(name, None)
        if slot is None:
            raise KeyError(f"LoRA adapter {name!r} is not loaded")
        self.retiring.add(slot)
        return slot

    def release(self, slot: int) -> None:
        """A retired slot no sequence reads any more: zeroed and free."""
        self.retiring.discard(slot)
        self._clear(slot)

    def slot_of(self, name: str | None) -> int:
        """The slot of adapter `name`; 0 (the base) for None."""
        if name is None:
            return 0
        if name not in self.slots:
            raise KeyError(f"LoRA adapter {name!r} is not loaded")
        return self.slots[name]

    def feed(self, slots: list[int]) -> dict[str, np.ndarray]:
        """The LoRA inputs of one run whose rows use `slots`."""
        return {SLOT_INPUT: np.asarray(slots, np.int64), **self.arrays}

    def _clear(self, slot: int) -> None:
        for array in self.arrays.values():
            array[slot] = 0
