"""Layer segmentation: a graph of repeated layers is cut at its residual stream, each distinct segment is searched
once, and the candidates assembled from the segments' forms compute what the whole graph's search gives."""

import pickle

import numpy as np

import luminal as lm
import luminal.functional as F
from luminal.compiler.kernels import ir
from luminal.compiler.search import segments
from luminal.compiler.search.stage import SearchOptions, search
from luminal.symbolic import var
from tests.compiler.test_matmul import _passes, check_every_candidate

RNG = np.random.default_rng(11)
DIM, HEADS, SEQ = 16, 2, 6


def _encoder(layers: int, outputs_per_layer: bool = False) -> lm.Graph:
    """A post-norm encoder over a padding mask (read by every layer: a long-lived value), weights per layer."""
    g = lm.Graph()
    b = lm.sym("batch", max=4)
    x = g.input("x", (b, SEQ, DIM))
    allowed = g.input("allowed", (b, 1, 1, SEQ), lm.bool_)

    def weight(name, shape):
        t = g.weight(name, shape)
        g.bind({name: (RNG.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)})
        return t

    for i in range(layers):
        qkv = F.linear(x, weight(f"l{i}.qkv", (3 * DIM, DIM)), weight(f"l{i}.qkv_b", (3 * DIM,)))
        qkv = qkv.reshape(b, SEQ, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=allowed)
        attn = F.linear(attn.transpose(1, 2).reshape(b, SEQ, DIM), weight(f"l{i}.out", (DIM, DIM)))
        x = F.layer_norm(x + attn, (DIM,), weight(f"l{i}.ln1", (DIM,)), weight(f"l{i}.ln1_b", (DIM,)))
        ffn = F.linear(F.gelu(F.linear(x, weight(f"l{i}.fc1", (2 * DIM, DIM)))), weight(f"l{i}.fc2", (DIM, 2 * DIM)))
        x = F.layer_norm(x + ffn, (DIM,), weight(f"l{i}.ln2", (DIM,)), weight(f"l{i}.ln2_b", (DIM,)))
        if outputs_per_layer and i < layers - 1:
            (x * 2.0).output(f"layer{i}")  # an output read in the middle of the graph
    x.output("y")
    return g


def _feed(batch=3):
    allowed = RNG.random((batch, 1, 1, SEQ)) > 0.3
    allowed[..., 0] = True
    return {"x": RNG.standard_normal((batch, SEQ, DIM)).astype(np.float32), "allowed": allowed}


def test_layers_cut_into_repeated_segments_that_keep_attention_whole():
    graph = _passes(_encoder(4))
    cut = segments.cut(graph)
    kinds = {s.key for s in cut}
    assert segments.repeated(cut) and len(kinds) <= len(cut) // 2
    assert [n for s in cut for n in s.nodes] == sorted(n for s in cut for n in s.nodes)  # consecutive, in order
    found = search(graph, "cpu", SearchOptions(isolate=False))
    whole = search(graph, "cpu", SearchOptions(isolate=False, segment=False))
    assert found.report["segments"]["segments"] == len(cut) and found.report["segments"]["searched"] == len(kinds)
    # What recognition finds is the same: one attention per layer, every linear a MatMul. Fusion offers a
    # little less in segments: nothing across a cut, where the value is stored.
    fusion = [r.report["rulesets"].pop("fusion")["Inline"] for r in (found, whole)]
    assert found.report["rulesets"] == whole.report["rulesets"]
    assert 0.9 * fusion[1] <= fusion[0] <= fusion[1]
    assert found.report["rulesets"]["attention"]["Attention"] == 4
    assert sum(found.report["egraph_nodes"]) < sum(whole.report["egraph_nodes"])


def test_every_assembled_candidate_matches_the_interpreter():
    report = check_every_candidate(_encoder(3), _feed(), "segmented encoder")
    assert report["segments"]["searched"] < report["segments"]["segments"]


def test_outputs_read_inside_segments():
    g = _encoder(3, outputs_per_layer=True)
    report = check_every_candidate(g, _feed(2), "encoder with an output per layer")
    assert "segments" in report
    prog = lm.compile(g, cache=False)
    assert list(prog.run(_feed(2))) == ["layer0", "layer1", "y"]


def test_a_graph_without_repetition_is_searched_whole():
    g = lm.Graph()
    x = g.input("x", (4, 8))
    w = g.weight("w", (8, 8))
    g.bind({"w": RNG.standard_normal((8, 8)).astype(np.float32)})
    F.softmax(F.linear(x, w), -1).output("y")
    found = search(_passes(g), "cpu", SearchOptions(isolate=False))
    assert "segments" not in found.report


def test_segment_graph_reads_parameters_by_position():
    graph = _passes(_encoder(2))
    cut = segments.cut(graph)
    key = next(s.key for s in cut if sum(t.key == s.key for t in cut) == 2)
    first, again = (s for s in cut if s.key == key)
    a, b = segments.segment_graph(graph, first), segments.segment_graph(graph, again)
    # Different weights and producers, one signature: p{k} / w{k} in order of first reading.
    assert first.params != again.params
    assert list(a.inputs) == list(b.inputs) and list(a.weights) == list(b.weights) and list(a.outputs) == ["o0"]
    assert [repr(n.op) for n in a.nodes] == [repr(n.op) for n in b.nodes]


def test_a_kernel_value_pickles_without_its_cached_hash():
    v = ir.Apply("Add", (ir.Load("b1", var("_i0", 0, 7), lm.float32), ir.Const(1.0, lm.float32)), lm.float32)
    hash(v)
    back = pickle.loads(pickle.dumps(v))
    assert "_hash" not in back.__dict__ and back == v and hash(back) == hash(v)
