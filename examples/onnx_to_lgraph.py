"""Convert an ONNX model into a luminal `.lgraph` file (graph + weights in one file, ready for `lm.load`).

    python examples/onnx_to_lgraph.py model.onnx [model.lgraph] [--fix NAME=array.npy ...]

`--fix` fixes a graph input to the array in a .npy file at import, for models that feed a shape-deciding
value (a Reshape's shape, a Slice's bounds) as an input: a luminal graph is static.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import luminal as lm
import luminal.onnx
from luminal.view import format_shape


def convert(source: Path, target: Path, fixed: dict[str, np.ndarray]) -> lm.Graph:
    graph = luminal.onnx.load(source, constant_inputs=fixed)
    lm.save(graph, target)
    return graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Convert an ONNX model into a luminal .lgraph file.")
    parser.add_argument("model", type=Path, help="the .onnx file")
    parser.add_argument("output", type=Path, nargs="?", help="the .lgraph file (default: beside the model)")
    parser.add_argument("--fix", action="append", default=[], metavar="NAME=FILE.npy", help="fix an input's value")
    args = parser.parse_args(argv)
    fixed = {}
    for item in args.fix:
        name, _, path = item.partition("=")
        fixed[name] = np.load(path)
    target = args.output or args.model.with_suffix(".lgraph")
    try:
        graph = convert(args.model, target, fixed)
    except luminal.onnx.OnnxImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, node_id in graph.inputs.items():
        node = graph.nodes[node_id]
        print(f"input  {name}: {node.dtype.name}{format_shape(node.shape)}")
    for name, node_id in graph.outputs.items():
        node = graph.nodes[node_id]
        print(f"output {name}: {node.dtype.name}{format_shape(node.shape)}")
    size = sum(a.nbytes for a in graph.weight_data.values())
    print(f"{len(graph.nodes)} nodes, {len(graph.weights)} weights ({size / 1e6:.2f} MB) -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
