"""Where a CUDA library (libnvrtc, libcublas) may be on this machine, and the first of those places that loads."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys


def candidates(name: str, wheel_folders: tuple[str, ...]) -> list[str]:
    """Paths of `lib{name}.so*`, most specific first: NVIDIA's pip wheels (their `wheel_folders` under each
    sys.path entry), $CUDA_PATH and $CUDA_HOME, the usual toolkit folders, then the loader's own search."""
    found = []
    for root in sys.path:
        for sub in wheel_folders:
            found += sorted(glob.glob(os.path.join(root, sub, f"lib{name}.so*")), reverse=True)
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda", "/usr/local/cuda-*"):
        if root:
            found += sorted(glob.glob(os.path.join(root, "lib64", f"lib{name}.so*")), reverse=True)
    loader = ctypes.util.find_library(name)
    return found + ([loader] if loader else [])


def first_loadable(paths: list[str]) -> ctypes.CDLL | None:
    for path in paths:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def not_found(name: str, package: str, tried: list[str]) -> str:
    """What to say when no `lib{name}` loaded: the package to install and the places tried."""
    return (
        f"lib{name} not found (pip install '{package}', or set CUDA_PATH to a CUDA toolkit); "
        f"tried: {tried or 'nothing on sys.path, CUDA_PATH or /usr/local/cuda*'}"
    )
