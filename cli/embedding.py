"""The embedding package `luminal deploy FOLDER` builds from a sentence-transformers folder before uploading it."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from luminal.cli.common import err, fail


def is_embedding_folder(folder: Path) -> bool:
    """A sentence-transformers folder: it says which modules it chains (modules.json)."""
    return (folder / "modules.json").exists()


def embedding_package_file(folder: Path, max_batch: int) -> Path:
    """Build the folder's embedding package into a temporary file (removed when the command exits)."""
    from luminal.embedding_package import build_package, save_package

    tmp = Path(tempfile.mkdtemp(prefix="luminal-embedding-"))
    atexit.register(shutil.rmtree, tmp, True)
    path = tmp / f"{folder.name or 'model'}.lemb"
    with err.status(f"building the sentence-embedding graph of {folder}"):
        try:
            save_package(build_package(folder, max_batch=max_batch), path)
        except (OSError, ValueError, NotImplementedError) as e:  # no tokenizer, modules not built, missing weights
            fail(f"{folder}: {e}")
    return path
