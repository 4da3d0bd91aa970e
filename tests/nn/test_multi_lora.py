"""Multi-LoRA: two PEFT adapters and the base in one batch of paged decode steps (compiled for the CPU) give,
row by row, the greedy tokens of transformers running PEFT's merged adapter; adapters that do not fit are refused
naming why."""

import json

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.lora_adapter import LoraRefused, check_adapter, load_adapter
from luminal.lora_bank import LoraBank
from luminal.nn.lora import LoraLayout, adapted_shapes, attach_lora
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import paged_chunk_graph, paged_step_graph, pool_name
from tests.lora_adapters import ADAPTERS, make_adapter, make_adapters
from tests.nn.hf import tiny_model

CONFIG = transformers.LlamaConfig(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, rope_theta=100.0)  # fmt: skip
SIZE, BLOCKS_PER_ROW, NEW_TOKENS = 4, 8, 6


def hf_greedy(model, prompt):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, CONFIG)
    root = tmp_path_factory.mktemp("adapters")
    merged = make_adapters(hf, root)
    return hf, weights, root, merged


def _greedy_batch(chunk_run, step_run, bank, rows):
    """rows: (prompt, adapter name or None). Each prompt prefilled alone by the chunk program, then every row
    decoded together by the step program, each row with its own adapter slot: the new tokens of each row."""
    kv_heads, head_dim = CONFIG.num_key_value_heads, CONFIG.hidden_size // CONFIG.num_attention_heads
    shape = (BLOCKS_PER_ROW * len(rows), kv_heads, SIZE, head_dim)
    pools = {pool_name(k, p): np.zeros(shape, np.float32) for k in range(2) for p in ("key", "value")}
    tables = [list(range(r * BLOCKS_PER_ROW, (r + 1) * BLOCKS_PER_ROW)) for r in range(len(rows))]
    slots = [bank.slot_of(name) for _, name in rows]
    tokens = []
    for (prompt, _), table, slot in zip(rows, tables, slots):
        feed = {
            "input_ids": np.array([prompt], np.int64),
            "position_ids": np.array([[0]], np.int64),
            "block_table": np.array([table[:1]], np.int64),
            "slots": np.array([[table[p // SIZE] * SIZE + p % SIZE for p in range(len(prompt))]], np.int64),
            **pools,
            **bank.feed([slot]),
        }
        out = chunk_run(feed)
        pools = {name: out[name] for name in pools}
        tokens.append([int(out["logits"][0].argmax())])
    lengths = [len(p) for p, _ in rows]
    for _ in range(NEW_TOKENS - 1):
        width = max(-(-n // SIZE) for n in lengths)
        feed = {
            "input_ids": np.array([[t[-1]] for t in tokens], np.int64),
            "position_ids": np.array([[n] for n in lengths], np.int64),
            "block_table": np.array([t[:width] for t in tables], np.int64),
            "slots": np.array([[t[n // SIZE] * SIZE + n % SIZE] for t, n in zip(tables, lengths)], np.int64),
            **pools,
            **bank.feed(slots),
        }
        out = step_run(feed)
        pools = {name: out[name] for name in pools}
        for t, logits in zip(tokens, out["logits"]):
            t.append(int(logits.argmax()))
        lengths = [n + 1 for n in lengths]
    return tokens


def _ours(weights, layout):
    model = LlamaForCausalLM(CONFIG.to_dict())
    attach_lora(model, layout)
    chunk = paged_chunk_graph(model, max_batch=4, max_positions=32, block_size=SIZE, max_chunk=32).bind(weights)
    step = paged_step_graph(model, max_batch=4, max_positions=32, block_size=SIZE).bind(weights)
    return model, chunk, step


def test_two_adapters_and_the_base_in_one_batch_match_peft_merged(setup):
    hf, weights, root, merged = setup
    layout = LoraLayout(slots=4, rank=8)
    model, chunk, step = _ours(weights, layout)
    bank = LoraBank(layout, adapted_shapes(model))
    for name in ADAPTERS:
        adapter = load_adapter(root / name)
        check_adapter(adapter, layout, bank.shapes, base="")
        bank.install(name, adapter)
    chunk_run, step_run = (lm.compile(g, target="cpu", cache=False).run for g in (chunk, step))
    rng = np.random.default_rng(3)
    rows = [(rng.integers(1, 40, 7).tolist(), name) for name in ("terse", None, "chatty")]
    got = _greedy_batch(chunk_run, step_run, bank, rows)
    want = [hf_greedy(merged[name] if name else hf, prompt) for prompt, name in rows]
    assert got == want
    # The adapters matter: the same prompt under each gives three different continuations.
    prompt = rows[0][0]
    assert len({tuple(hf_greedy(m, prompt)) for m in (hf, *merged.values())}) == 3


def test_removing_an_adapter_frees_its_slot_to_zero(setup):
    hf, weights, root, _ = setup
    layout = LoraLayout(slots=2, rank=8)
    bank = LoraBank(layout, adapted_shapes(_ours(weights, layout)[0]))
    bank.install("terse", load_adapter(root / "terse"))
    with pytest.raises(ValueError, match="slots are taken"):
        bank.install("chatty", load_adapter(root / "chatty"))
    bank.remove("terse")
    assert all(not a[1].any() for a in bank.arrays.values())
    assert bank.install("chatty", load_adapter(root / "chatty")) == 1


def _refusal(setup, tmp_path, layout, base="", **extra):
    hf, weights, _, _ = setup
    make_adapter(hf, tmp_path, 4, 8, ["q_proj", "v_proj"], seed=9, **extra)
    shapes = adapted_shapes(_ours(weights, layout)[0])
    with pytest.raises(LoraRefused) as e:
        check_adapter(load_adapter(tmp_path), layout, shapes, base)
    return str(e.value)


def test_refusals_name_why(setup, tmp_path):
    assert "rank 4 is over" in _refusal(setup, tmp_path / "rank", LoraLayout(slots=2, rank=2))
    narrow = LoraLayout(slots=2, rank=8, targets=("q_proj",))
    assert "v_proj" in _refusal(setup, tmp_path / "targets", narrow)
    assert "DoRA" in _refusal(setup, tmp_path / "dora", LoraLayout(2, 8), use_dora=True)
    assert "bias" in _refusal(setup, tmp_path / "bias", LoraLayout(2, 8), bias="lora_only")
    folder = tmp_path / "base"
    make_adapter(setup[0], folder, 4, 8, ["q_proj"], seed=1)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "org/Other-Model"
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(LoraRefused, match="Other-Model"):
        check_adapter(load_adapter(folder), LoraLayout(2, 8), {}, base="org/Tiny-Llama")
