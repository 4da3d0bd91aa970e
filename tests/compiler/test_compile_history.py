"""A compile's result does not depend on what the process compiled before it: the same model compiled in a fresh
process and after other models (whose symbols share names but not ranges) gives the same program source. The
compiler's memo tables (the softmax template, folded indices, unflattened positions) must key everything their
results depend on."""

import subprocess
import sys
from pathlib import Path

import luminal as lm
from luminal.nn.models.bert import BertConfig, bert_graph
from tests.compiler.cuda.graphs import MODELS, bind_random

ROOT = Path(__file__).resolve().parents[2]
BERT = BertConfig(
    vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=16, dtype=lm.bfloat16,
)  # fmt: skip
# The tiny bf16 Llama prefill (bench/gpu_models.py's SMALL sizes): batch at most 1, sequence at most 16.
FRESH = """
import sys
sys.path[:0] = [{root!r}, {bench!r}]
import luminal as lm
from gpu_models import SMALL, llama_graphs
from tests.compiler.cuda.graphs import bind_random
print(lm.compile(bind_random(llama_graphs(SMALL).prefill), {target!r}, cache=False).source)
"""


def _fresh_source(target: str) -> str:
    code = FRESH.format(root=str(ROOT), bench=str(ROOT / "bench"), target=target)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return done.stdout[:-1]  # print's newline


def test_a_model_compiles_alike_after_others():
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_models import SMALL, llama_graphs

    for target in ("h100", "cpu"):
        # batch up to 2, sequence up to 8 (BERT); batch 2, sequence up to 16 (GPT-2)
        lm.compile(bind_random(bert_graph(BERT, max_batch=2, max_seq=8)), target, cache=False)
        lm.compile(MODELS["gpt2"]()[0], target, cache=False)
        after = lm.compile(bind_random(llama_graphs(SMALL).prefill), target, cache=False).source
        assert after == _fresh_source(target), f"{target}: the Llama prefill compiled differently after other models"
