"""The embedding package `luminal deploy FOLDER` builds from a sentence-transformers folder or a Hugging Face
encoder folder before uploading it."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from luminal.cli.common import err, fail

POOLINGS = ("mean", "cls", "last")


def is_embedding_folder(folder: Path) -> bool:
    """A sentence-transformers folder (modules.json) or a folder of an encoder luminal builds (BERT)."""
    from luminal.embedding_package import is_encoder_folder

    return is_encoder_folder(folder)


def embedding_package_file(
    folder: Path, max_batch: int, pooling: str | None = None, normalize: bool = False, matryoshka: bool = False
) -> Path:
    """Build the folder's embedding package into a temporary file (removed when the command exits)."""
    from luminal.embedding_package import build_package, save_package

    if pooling is not None and pooling not in POOLINGS:
        fail(f"--pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    tmp = Path(tempfile.mkdtemp(prefix="luminal-embedding-"))
    atexit.register(shutil.rmtree, tmp, True)
    path = tmp / f"{folder.name or 'model'}.lemb"
    with err.status(f"building the sentence-embedding graph of {folder}"):
        try:
            package = build_package(folder, max_batch, pooling, normalize, matryoshka)
            save_package(package, path)
        except (OSError, ValueError, NotImplementedError) as e:  # no tokenizer, modules not built, missing weights
            fail(f"{folder}: {e}")
    return path
