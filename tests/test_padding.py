"""Padding declarations: the graph API checks them, the .lgraph manifest carries them, and a file's hostile or
inconsistent declarations are rejected with the reason; a file without any loads as "no padding"."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.graph import GraphError
from luminal.graph_file import MANIFEST, graph_to_bytes
from luminal.graph_json import GraphFileError, signature
from luminal.padding import PaddingError
from tests.graph_files import edit


def encoder(pad_ids=0, pad_mask=0, pooled=True) -> lm.Graph:
    """input_ids and attention_mask [b, s] -> hidden [b, s, 4] (and a pooled [b, 4])."""
    g = lm.Graph()
    b, s = lm.sym("b", max=8), lm.sym("s", max=32)
    ids = g.input("input_ids", (b, s), lm.int64, pad={1: pad_ids} if pad_ids is not None else None)
    mask = g.input("attention_mask", (b, s), lm.int64, pad={-1: pad_mask} if pad_mask is not None else None)
    table = g.weight("table", (10, 4))
    hidden = table[ids] * mask.to(lm.float32).unsqueeze(-1)
    hidden.output("hidden")
    if pooled:
        hidden.sum(1).output("pooled")
    return g.bind({"table": np.arange(40, dtype=np.float32).reshape(10, 4)})


def test_signature_marks_padded_inputs_and_the_output_dims_that_follow():
    sig = signature(encoder(pad_ids=3))
    assert sig["inputs"][0]["pad"] == [{"dim": 1, "value": 3}]
    assert sig["inputs"][1]["pad"] == [{"dim": 1, "value": 0}]  # -1 is stored as the dim it names
    hidden, pooled = sig["outputs"]
    assert hidden["unpad"] == [1] and "unpad" not in pooled


def test_a_graph_without_declarations_keeps_the_old_signature():
    sig = signature(encoder(pad_ids=None, pad_mask=None))
    assert all(set(entry) == {"name", "shape", "dtype"} for entry in sig["inputs"] + sig["outputs"])


def test_round_trip_through_the_file():
    g2 = lm.load(graph_to_bytes(encoder(pad_ids=5)))
    assert g2.padding == {"input_ids": {1: 5}, "attention_mask": {1: 0}}
    assert signature(g2) == signature(encoder(pad_ids=5))


@pytest.mark.parametrize(
    "pad, message",
    [
        ({2: 0}, "not a dim of its shape"),
        ({"1": 0}, "not a dim of its shape"),
        ({1: 0.5}, "integer input pads with an integer"),
        ({1: "0"}, "must be a number"),
        ([1, 0], "must map dims to pad values"),
    ],
)
def test_bad_declarations_name_the_problem(pad, message):
    g = lm.Graph()
    with pytest.raises(PaddingError, match=message):
        g.input("ids", (lm.sym("b"), lm.sym("s")), lm.int64, pad=pad)


def test_a_concrete_dim_cannot_be_padded_and_floats_must_be_finite():
    g = lm.Graph()
    with pytest.raises(PaddingError, match="dim 1 is 7, not a symbol"):
        g.input("ids", (lm.sym("b"), 7), lm.int64, pad={1: 0})
    with pytest.raises(PaddingError, match="must be finite"):
        g.input("x", (lm.sym("b"), lm.sym("s")), pad={1: float("nan")})


def test_every_input_with_the_padded_symbol_must_declare_a_value():
    g = encoder(pad_mask=None)
    with pytest.raises(PaddingError, match="'attention_mask' dim 1 is 's', which another input pads"):
        signature(g)
    with pytest.raises(PaddingError):
        graph_to_bytes(g)  # a save never writes a file whose padding the loader would refuse


def test_expressions_of_a_padded_symbol_are_refused():
    g = lm.Graph()
    s = lm.sym("s", max=8)
    x = g.input("x", (lm.sym("b"), s), pad={1: 0.0})
    lm.functional.pad(x, (0, 1)).output("longer")  # [b, s + 1] cannot be cut back to one request's length
    with pytest.raises(PaddingError, match=r"output 'longer' dim 1 is s \+ 1"):
        signature(g)


def test_declare_padding_on_an_existing_input_and_remove_it():
    g = encoder(pad_ids=None, pad_mask=None)
    g.declare_padding("input_ids", {1: 0})
    g.declare_padding("attention_mask", {1: 0})
    assert signature(g)["outputs"][0]["unpad"] == [1]
    g.declare_padding("input_ids", {})
    with pytest.raises(GraphError, match="no input 'nope'"):
        g.declare_padding("nope", {1: 0})


def _set_pad(index: int, value):
    def fn(manifest):
        manifest["signature"]["inputs"][index]["pad"] = value

    return fn


@pytest.mark.parametrize(
    "change, message",
    [
        (_set_pad(0, [{"dim": 0, "value": 0}]), "'input_ids' dim 1 is 's', which another input pads"),
        (_set_pad(0, [{"dim": 1, "value": "zero"}]), "must be a number"),
        (_set_pad(0, [{"dim": 1, "value": 2**70}]), "does not fit int64"),
        (_set_pad(0, [{"dim": 7, "value": 0}]), "not a dim of its shape"),
        (_set_pad(0, [{"dim": 1}]), "each pad entry must be"),
        (_set_pad(0, "all"), "pad must be a list"),
        (_set_pad(0, [{"dim": 1, "value": 0}] * 9), "pad must be a list"),
        (_set_pad(1, None), "pad must be a list"),
        (_set_pad(1, [{"dim": True, "value": 0}]), "is not an integer"),
        (lambda m: m["signature"]["outputs"][0].pop("unpad"), "disagrees with graph.json"),
        (lambda m: m["signature"]["outputs"][1].update(unpad=[1]), "disagrees with graph.json"),
        (lambda m: m["signature"]["inputs"][1].pop("pad"), "which another input pads"),
    ],
)
def test_hostile_or_inconsistent_manifests_are_rejected(change, message):
    data = edit(MANIFEST, change, encoder())
    with pytest.raises(GraphFileError, match=message):
        lm.load(data)


def test_old_files_without_declarations_load_as_no_padding():
    data = edit(MANIFEST, lambda m: None, encoder(pad_ids=None, pad_mask=None))
    assert lm.load(data).padding == {}


def _imported(extra_input: str | None = None, mask_symbol: str = "s", longer_output: bool = False) -> lm.Graph:
    """What an importer produces: inputs without declarations, named as Hugging Face names them."""
    g = lm.Graph()
    b, s = lm.sym("b", max=8), lm.sym("s", max=32)
    ids = g.input("input_ids", (b, s), lm.int64)
    mask = g.input("attention_mask", (b, lm.sym(mask_symbol, max=32)), lm.int64)
    if extra_input:
        g.input(extra_input, (b, s), lm.int64)
    y = ids * 2
    (lm.functional.pad(y, (0, 1)) if longer_output else y).output("y")
    mask.sum(1).output("tokens")
    return g


def test_importers_declare_padding_only_for_a_mask_over_the_tokens():
    from luminal.padding import declare_masked_sequence_padding

    g = _imported(extra_input="token_type_ids")
    assert declare_masked_sequence_padding(g, pad_token_id=7)
    assert g.padding == {"input_ids": {1: 7}, "attention_mask": {1: 0}, "token_type_ids": {1: 0}}
    # a mask of its own length (past + new tokens), an unknown input of that length, an output s + 1
    for refused in (_imported(mask_symbol="total"), _imported("position_ids"), _imported(longer_output=True)):
        assert not declare_masked_sequence_padding(refused)
        assert refused.padding == {}
