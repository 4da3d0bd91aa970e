"""Export a PyTorch module to a .lgraph file: python examples/torch_to_lgraph.py [model.lgraph]

torch.export traces the module; luminal.torch translates its ATen graph into luminal ops with the weights bound
under their state-dict names and the batch dim a symbol, so the file runs (and deploys) at any batch size.
"""

import sys

import numpy as np
import torch

import luminal as lm
import luminal.torch

model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).eval()
example = torch.randn(2, 16)
batch = torch.export.Dim("batch", min=1, max=1024)

graph = luminal.torch.export(model, (example,), dynamic_shapes=({0: batch},))
path = sys.argv[1] if len(sys.argv) > 1 else "model.lgraph"
lm.save(graph, path)

x = torch.randn(5, 16)
got = lm.run(lm.load(path), {"input": x.numpy()})["output0"]
with torch.no_grad():
    print(
        f"wrote {path}: inputs {list(graph.inputs)}, max |luminal - torch| = {np.abs(got - model(x).numpy()).max():.2e}"
    )
