"""What the CUDA and Metal backends share: the launch plan (launch.py: a kernel's shape on a grid of blocks, and
the merges of consecutive launches), the kernel bodies in the CUDA dialect that Metal re-signs, and the passes
both run on the kernel IR (attention reads and layout, norms in GEMV prologues, GEMV order, sibling GEMMs,
copies beside their partners: passes.py runs them in order); program.py writes a launch's source."""
