"""Graph display: the text form names every node, op param and view; the DOT form is valid Graphviz."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np

import luminal as lm
from luminal.display import movements, to_dot, to_text
from luminal.hl import prim
from luminal.view import idx

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
NODE_LINE = re.compile(rf"^  n(\d+) \[label={_QUOTED}, shape=(\w+)\];$")
EDGE_LINE = re.compile(rf"^  n(\d+) -> n(\d+)(?: \[label={_QUOTED}\])?;$")


def small_graph() -> lm.Graph:
    g = lm.Graph()
    b = lm.sym("b", 1, 16)
    x = g.input("x", (b, 4))
    w = g.weight("w", (4,))
    xt = x.with_view(x.st.permute([1, 0]))  # (4, b)
    y = prim.add(prim.exp2(xt), prim.broadcast_to(w.with_view(w.st.reshape((4, 1))), (4, b)))
    prim.sum_reduce(y, 1).output("total")
    padded = x.with_view(x.st.slice([(0, b, 1), (1, 4, 2)]).pad([(0, 0), (1, 0)]).flip([1]))
    prim.cast(padded, lm.int32).output('odd "name" \\ here')
    prim.iota(g, idx(0, 3) * 2, (3,), lm.int64).output("evens")
    return g


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def test_text_lists_every_node_with_views_and_params():
    g = small_graph()
    lines = to_text(g).splitlines()
    expected = [
        "# inputs: x=%0 float32(b, 4)",
        "# weights: w=%1 float32(4,) (unbound)",
        "# symbols: b in [1, 16]",
        '%0 = Input["x"]() -> float32(b, 4)',
        '%1 = Weight["w"]() -> float32(4,)',
        "%2 = Exp2(%0 view(permute(1, 0))) -> float32(4, b)",
        "%3 = Add(%2, %1 view(reshape(4, 1) expand(4, b))) -> float32(4, b)",
        "%4 = SumReduce[axis=1](%3) -> float32(4,)",
        '%5 = Output["total"](%4) -> float32(4,)',
        "%6 = Cast[int32](%0 view(slice(0:b, 1:4:2) pad((0, 0), (1, 0)) flip(1))) -> int32(b, 3)",
        '%7 = Output["odd \\"name\\" \\\\ here"](%6) -> int32(b, 3)',
        "%8 = Iota[2*_i0]() -> int64(3,)",
    ]
    for line in expected:
        assert line in lines, f"missing {line!r} in\n" + "\n".join(lines)
    assert len([ln for ln in lines if ln.startswith("%")]) == len(g.nodes)
    assert lines[2] == '# outputs: total=%5 float32(4,), "odd \\"name\\" \\\\ here"=%7 int32(b, 3), evens=%9 int64(3,)'
    g.bind({"w": np.ones(4, np.float32)})
    assert "# weights: w=%1 float32(4,)" in to_text(g).splitlines()


def test_constants_show_their_value():
    g = lm.Graph()
    prim.scalar(g, float("-inf"), lm.float32, (2,)).output("c")
    assert "%0 = Constant[-inf]() -> float32()" in to_text(g)
    assert '%1 = Output["c"](%0 view(reshape(1) expand(2))) -> float32(2,)' in to_text(g)


def test_display_prints_and_returns(capsys):
    g = small_graph()
    assert g.display() == to_text(g)
    assert g.display(format="dot") == to_dot(g)
    printed = capsys.readouterr().out
    assert to_text(g) in printed and to_dot(g) in printed


def test_dot_is_valid_graphviz():
    g = small_graph()
    dot = to_dot(g)
    lines = dot.splitlines()
    assert lines[0] == "digraph luminal {" and lines[-1] == "}"
    outside_strings = re.sub(_QUOTED, "", dot)
    assert outside_strings.count("{") == outside_strings.count("}") == 1
    labels, edges = {}, []
    for line in lines[3:-1]:  # after the digraph line, rankdir and node defaults
        node, edge = NODE_LINE.match(line), EDGE_LINE.match(line)
        assert node or edge, f"not a node or edge statement: {line!r}"
        if node:
            labels[int(node.group(1))] = unescape(node.group(2))
        else:
            edges.append((int(edge.group(1)), int(edge.group(2)), unescape(edge.group(3) or "")))
    assert sorted(labels) == [n.id for n in g.nodes]
    assert all(a in labels and b in labels for a, b, _ in edges)
    assert sorted((a, b) for a, b, _ in edges) == sorted((s, n.id) for n in g.nodes for s, _ in n.inputs)
    assert labels[3] == "%3 Add\nfloat32(4, b)"
    assert labels[7] == '%7 Output["odd \\"name\\" \\\\ here"]\nint32(b, 3)'
    assert (0, 2, "permute(1, 0)") in edges and (2, 3, "") in edges
    if shutil.which("dot"):  # Graphviz itself, where installed
        subprocess.run(["dot", "-Tsvg"], input=dot.encode(), check=True, capture_output=True)


def test_movements_of_plain_and_reshaped_views():
    st = lm.ShapeTracker.contiguous((2, 3))
    assert movements(st) == ""
    assert movements(st.reshape((6,))) == "reshape(6)"
    assert movements(st.permute([0, 1])) == ""  # the identity permutation reads the buffer as is
