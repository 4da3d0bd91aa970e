"""The tokenizers of embedding deployments, read from their uploaded packages once and kept: an upload's artifact
key names its bytes (a sha256), so a kept tokenizer never goes stale."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from luminal.embedding_package import read_tokenizer


class EmbeddingTokenizers:
    def __init__(self, local_path: Callable[[str], Path]):
        self._local_path = local_path  # artifact key -> a local file (the artifact store's)
        self._kept: dict[str, Tokenizer] = {}
        self._lock = threading.Lock()  # one read per package: reading checks the whole file (the weights too)

    def get(self, artifact_key: str) -> Tokenizer:
        """The package's tokenizer (blocks while the package is read: call it off the event loop)."""
        with self._lock:
            if artifact_key not in self._kept:
                self._kept[artifact_key] = read_tokenizer(self._local_path(artifact_key))
            return self._kept[artifact_key]
