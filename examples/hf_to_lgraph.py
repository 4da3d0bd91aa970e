"""Build a luminal graph from a Hugging Face model folder (config.json + safetensors) and save it as .lgraph.

    python examples/hf_to_lgraph.py path/to/all-MiniLM-L6-v2 minilm.lgraph --max-seq 256
    python examples/hf_to_lgraph.py path/to/tiny-llama llama.lgraph --max-batch 8

BERT, GPT-2, Llama / Mistral / Qwen2 / Qwen3 / Phi-3 and Gemma 2 / Gemma 3 (text) folders are read by config.json's
model_type; a sentence-transformers folder (with modules.json) becomes a sentence-embedding graph. Token ids are the
graph's inputs: tokenize on the client side. Every one of these models masks padded positions, so the file declares
its sequence dims paddable (`luminal/padding.py`) and a deployment batches requests of different lengths.
"""

from __future__ import annotations

import argparse
import sys

import luminal as lm
from luminal.nn.models.loading import graph_from_folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a Hugging Face model folder: config.json and *.safetensors")
    parser.add_argument("output", help="the .lgraph file to write")
    parser.add_argument("--max-batch", type=int, default=64, help="largest batch the graph accepts")
    parser.add_argument("--max-seq", type=int, help="longest token sequence accepted (default: the model's)")
    args = parser.parse_args(argv)
    graph = graph_from_folder(args.folder, args.max_batch, args.max_seq)
    lm.save(graph, args.output)
    print(f"wrote {args.output}: {graph}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
