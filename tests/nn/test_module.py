"""The Module contract: parameter paths are state-dict names, fixed by the outermost module called; a module
called twice on one graph shares its weights; mistakes are reported by name."""

import pytest

import luminal as lm
from luminal import nn
from luminal.graph import GraphError
from luminal.view import ShapeError


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.layers = nn.ModuleList([nn.LayerNorm(4), nn.LayerNorm(4)])

    def forward(self, x):
        for norm in self.layers:
            x = norm(self.proj(x))  # the same projection twice: one set of weights
        return x


def test_paths_are_state_dict_names_and_reuse_shares_weights():
    g = lm.Graph()
    Block()(g.input("x", (2, 4))).output("y")
    assert sorted(g.weights) == ["layers.0.bias", "layers.0.weight", "layers.1.bias", "layers.1.weight",
                                 "proj.bias", "proj.weight"]  # fmt: skip


def test_prefix_for_checkpoints_saved_inside_a_wrapper():
    g = lm.Graph()
    Block().assign_names("bert.encoder.")(g.input("x", (2, 4))).output("y")
    assert "bert.encoder.layers.1.weight" in g.weights


def test_modules_of_one_name_but_another_shape_clash():
    g = lm.Graph()
    x = g.input("x", (2, 4))
    nn.Linear(4, 4)(x)
    with pytest.raises(ShapeError, match="already float32"):
        nn.Linear(4, 3)(x)  # also named "weight" at the root, but [3, 4]


def test_undeclared_parameter_is_named():
    with pytest.raises(GraphError, match="no parameter 'scale'"):
        nn.Linear(2, 2).param(lm.Graph(), "scale")
