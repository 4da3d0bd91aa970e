"""The tokenizers and context lengths of language-model deployments, read from their compiled files once and kept:
the gateway tokenizes and checks lengths; the workers hold the programs and weights, which are never read here.
An artifact key names its bytes (a sha256), so a kept entry never goes stale."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from luminal.scheduler.generation.language_model import load_serving_text
from luminal.scheduler.generation.tokenizer import TextCodec


class LanguageModelTexts:
    def __init__(self, local_path: Callable[[str], Path]):
        self._local_path = local_path  # artifact key -> a local file (the artifact store's)
        self._kept: dict[str, tuple[TextCodec, int]] = {}
        self._lock = threading.Lock()  # one read per file

    def get(self, program_key: str) -> tuple[TextCodec, int]:
        """(codec, max_positions) of the compiled model (blocks while it is read: call it off the event loop)."""
        with self._lock:
            if program_key not in self._kept:
                self._kept[program_key] = load_serving_text(self._local_path(program_key))
            return self._kept[program_key]
