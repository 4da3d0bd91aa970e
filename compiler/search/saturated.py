"""Saturated e-graphs kept for the next search of the same graph: encoding and the rule sets do not depend on the
target, only extraction's cost does, so compiling one graph for several targets runs them once.

Each thread keeps its own (egglog's e-graphs may be used and dropped only on the thread that made them): the last
KEEP it saturated under KEEP_NODES e-nodes each, keyed by the graph's structure (not its weights: the search
never reads weight data) and the limits the rules ran under. A warm search child (search/child_pool.py) keeps
them the same way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from luminal.compiler.search.encode import Encoding
from luminal.compiler.search.extract import frozen_choices
from luminal.graph import Graph
from luminal.graph_file import structure_digest

KEEP = 2  # a graph's segments of two kinds, compiled for one target after another
KEEP_NODES = 30_000  # about 80 MB of e-graph at ~2.7 KB per e-node: larger ones are searched again


@dataclass
class Saturated:
    """A graph's e-graph after every phase's rules, and what the search reports of them."""

    enc: Encoding
    attention: int  # Attention alternatives the pattern matcher added
    runs: list  # runner.RunReport per phase
    sizes: dict  # e-nodes per constructor at the end
    seconds: dict[str, float]  # encode and rules, when they ran
    _choices: Any = None

    def choices(self) -> Any:
        """The frozen e-graph's (root, e-classes), read once for every extraction (extract.frozen_choices)."""
        if self._choices is None:
            self._choices = frozen_choices(self.enc)
        return self._choices


_here = threading.local()


def _kept() -> OrderedDict[str, Saturated]:
    if not hasattr(_here, "kept"):
        _here.kept = OrderedDict()
    return _here.kept


def key(graph: Graph, *limits: Any) -> str:
    """The graph's structure (weight data aside) and the limits its rules run under."""
    digest = structure_digest(graph)
    digest.update(repr(limits).encode())
    return digest.hexdigest()


def find(k: str) -> Saturated | None:
    """What this thread kept under `k`, if it still has it."""
    kept = _kept()
    found = kept.get(k)
    if found is not None:
        kept.move_to_end(k)
    return found


def keep(k: str, saturated: Saturated) -> None:
    if saturated.runs[-1].sizes[-1] > KEEP_NODES:
        return
    kept = _kept()
    kept[k] = saturated
    while len(kept) > KEEP:
        kept.popitem(last=False)


def forget() -> None:
    """Drop what this thread kept."""
    _kept().clear()
