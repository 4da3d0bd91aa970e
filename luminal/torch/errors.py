"""What the PyTorch importer raises. Every message names the ATen operator concerned."""

from __future__ import annotations


class TorchImportError(ValueError):
    """A PyTorch program cannot be translated: something about it luminal's graph cannot express."""


class TorchUnsupportedError(TorchImportError):
    """The program uses ATen operators (or cases of them) that luminal does not translate.

    `operators` lists every unsupported operator the program uses, found before any node is translated,
    so one error tells the whole story rather than the first missing op of many.
    """

    def __init__(self, message: str, operators: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.operators = operators
