"""Grammar masks computed ahead: once a round has delivered its tokens, the next-token masks of the running
constrained sequences are computed on a thread of their own while the engine goes on to the next decode step, so
they are ready (or nearly) when its logits are. The step's program (ctypes) and llguidance's mask computation both
release the GIL, so on a machine with a core to spare the two overlap instead of adding up: without it a batch of
16 constrained sequences paid about 16 x 35 us of masks after every step (bench/structured_decode.py).

One thread: the jobs run in the order they were started, so two jobs never read one matcher at once, and the
engine's own reads and steps of a matcher wait for its job (TokenConstraint.expect)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from luminal.scheduler.generation.grammar import TokenConstraint


def _compute_all(constraints: list[TokenConstraint]) -> None:
    for constraint in constraints:
        constraint.compute_mask()


class MaskPrefetch:
    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-masks")
        self._closed = False

    def start(self, constraints: list[TokenConstraint]) -> None:
        """Compute the next masks of `constraints` on the mask thread; each constraint waits for it when read.
        Once closed (an engine thread that outlived its close), each mask is computed where it is read instead."""
        if not constraints or self._closed:
            return
        job = self._thread.submit(_compute_all, constraints)
        for constraint in constraints:
            constraint.expect(job)

    def close(self) -> None:
        self._closed = True
        self._thread.shutdown(wait=True)
