"""Rebuilding a graph node by node: the mechanism every deterministic pass uses.

A pass walks the old graph in order and, for each node, either copies it (with its inputs remapped) or
says the node *is* some already-built value read through a view (an alias). Consumers of an aliased node
then read the alias's buffer through the composed view, so replacing `x + 0` by `x` keeps every view
consumers had. Names (inputs, weights, outputs), symbols and bound weights carry over.
"""

from __future__ import annotations

from luminal import ops
from luminal.graph import Graph, Node
from luminal.view import ShapeTracker


class Rebuilder:
    def __init__(self, old: Graph):
        self.old = old
        self.new = Graph()
        self.new.symbols = dict(old.symbols)
        # old node id -> (new node id, view over the new node's buffer giving the old node's buffer)
        self.alias: dict[int, tuple[int, ShapeTracker | None]] = {}

    def resolve(self, src: int, view: ShapeTracker) -> tuple[int, ShapeTracker]:
        """Where an old edge (src, view) now reads from."""
        new_src, through = self.alias[src]
        return new_src, view if through is None else through.then(view)

    def inputs_of(self, node: Node) -> list[tuple[int, ShapeTracker]]:
        return [self.resolve(s, v) for s, v in node.inputs]

    def copy(self, node: Node, inputs: list[tuple[int, ShapeTracker]] | None = None) -> int:
        """Record `node`'s op in the new graph (inputs remapped unless given); returns the new id."""
        made = self.new.add(node.op, self.inputs_of(node) if inputs is None else inputs)
        op = node.op
        if isinstance(op, ops.Weight):
            self.new.weights[op.label] = made.id
            if op.label in self.old.weight_data:
                self.new.weight_data[op.label] = self.old.weight_data[op.label]
        elif isinstance(op, ops.Input):
            self.new.inputs[op.label] = made.id
        elif isinstance(op, ops.Output):
            self.new.outputs[op.label] = made.id
        self.alias[node.id] = (made.id, None)
        return made.id

    def alias_to(self, node: Node, new_src: int, view: ShapeTracker) -> None:
        """Declare that `node`'s buffer is the new node `new_src` read through `view`."""
        same = view.is_identity() and tuple(view.shape) == tuple(node.shape)
        self.alias[node.id] = (new_src, None if same else view)

    def finish(self) -> Graph:
        # Keep the signature's order: inputs and outputs in the order the old graph declared them.
        self.new.inputs = {k: self.new.inputs[k] for k in self.old.inputs if k in self.new.inputs}
        self.new.outputs = {k: self.new.outputs[k] for k in self.old.outputs if k in self.new.outputs}
        self.new.donated = {
            o: i for o, i in self.old.donated.items() if o in self.new.outputs and i in self.new.inputs
        }  # fmt: skip
        return self.new
