"""Fusion on the kernel IR: the fusions the search chose (fuse_chosen.py), the single-consumer policy for what it
could not see (fuse.py), index functions computed where they are read (fuse_index.py) and residual sums stored by
the GEMVs that make them (fuse_residual.py)."""
