"""`luminal deploy`'s LoRA options: --lora NAME=DIR pairs (repeatable), --lora-slots and --lora-rank, refused
naming the malformed one; none of them: no LoRA stacks."""

from pathlib import Path

import pytest

from luminal.cli.llm import LoraOptions


def test_pairs_become_the_package_options():
    options = LoraOptions.parse(["terse=/a/terse", "chatty=b"], slots=5, rank=32)
    assert options.build_options() == {
        "lora": {"terse": Path("/a/terse"), "chatty": Path("b")}, "lora_slots": 5, "lora_rank": 32
    }  # fmt: skip
    assert LoraOptions.parse([], None, None) is None
    assert LoraOptions.parse([], 3, None).adapters == {}  # stacks reserved for adapters added live


@pytest.mark.parametrize("pairs", [["terse"], ["=dir"], ["terse="], ["a=x", "a=y"]])
def test_malformed_pairs_are_refused(pairs):
    with pytest.raises(ValueError, match="--lora"):
        LoraOptions.parse(pairs, None, None)
