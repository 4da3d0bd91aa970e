"""One comparison of bench/gpu.py: every runner called once and checked against the anchor (torch eager),
then each timed in its own block, printed as rows side by side."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gpu_runners import Runner, keep, sync, to_host
from timing import synced_median_ms

# Agreement bound, relative to the anchor output's largest magnitude: bf16 keeps 8 bits of mantissa (0.4%),
# and rounding differences compound through the layers; a wrong kernel is off by the output's own scale.
AGREE = 0.05


@dataclass
class Timing:
    samples: int = 15
    inner: int = 10
    warmup: int = 3


@dataclass
class Result:
    ms: dict[str, float] = field(default_factory=dict)  # runner -> median ms per call
    unavailable: dict[str, str] = field(default_factory=dict)
    disagree: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def worst_difference(got: dict, want: dict) -> tuple[float, float, str]:
    """(max |got - want|, that output's max |want|, its name) over the outputs both have."""
    common = sorted(set(got) & set(want))
    worst = (0.0, 1.0, common[0] if common else "no common outputs")
    for name in common:
        a, b = to_host(got[name], like=want[name]), to_host(want[name])
        if a.shape != b.shape:
            return float("inf"), 1.0, f"{name} shape {a.shape} != {b.shape}"
        diff = float(np.max(np.abs(a - b))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 1.0
        if not np.isfinite(diff) or diff / max(scale, 1e-6) > worst[0] / max(worst[1], 1e-6):
            worst = (diff, scale, name)
    return worst


def compare(title: str, runners: list[Runner], timing: Timing) -> Result:
    """Check every runner's outputs against the first (the anchor: torch eager, or cuBLAS for a GEMM), then
    time each in its own block (warm-up, then medians); one row per runner, its speed-up over the anchor. A
    runner that cannot run here prints why."""
    result, anchor_out = Result(), None
    print(f"\n{title}")
    anchor = "cuBLAS" if runners and runners[0].name.startswith("cuBLAS") else "eager"
    print(f"  {'runner':<40} {'ms/call':>9} {'vs ' + anchor:>9} {'max|diff| vs ' + anchor + ' (output)':>34}")
    for runner in runners:
        if runner.call is None:
            result.unavailable[runner.name] = runner.unavailable or "unavailable"
            print(f"  {runner.name:<40} {runner.unavailable}")
            continue
        try:
            anchor_out = _row(title, runner, anchor_out, result, timing)
        except Exception as e:  # one broken runner must not cost the rest of a device session
            result.failed.append(f"{title}: {runner.name}: {type(e).__name__}")
            print(f"  {runner.name:<40} FAILED: {type(e).__name__}: {str(e)[:400]}")
    return result


def _row(title: str, runner: Runner, anchor_out: dict | None, result: Result, timing: Timing) -> dict:
    """Check `runner` against the anchor's outputs (it is the anchor when there are none yet), time it, print
    its row; returns the anchor's outputs."""
    out = keep(runner.call())
    sync()
    if anchor_out is None:
        anchor_out, check = out, "(anchor)"
    else:
        diff, scale, name = worst_difference(out, anchor_out)
        ok = diff <= AGREE * max(scale, 1.0)
        check = f"{diff:.3g} ({name}{'' if ok else ', DISAGREES'})"
        if not ok:
            result.disagree.append(f"{title}: {runner.name}")
    if not runner.timed:
        print(f"  {runner.name:<40} {'-':>9} {'-':>9} {check:>34}  {runner.note}")
        return anchor_out
    ms = synced_median_ms(runner.call, sync, timing.samples, timing.inner, timing.warmup)
    result.ms[runner.name] = ms
    eager = next(iter(result.ms.values()))
    print(f"  {runner.name:<40} {ms:>9.3f} {eager / ms:>8.2f}x {check:>34}  {runner.note}")
    return anchor_out
