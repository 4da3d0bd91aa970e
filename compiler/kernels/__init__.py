"""The kernel IR (ir.py), lowering a graph into it (lower.py, lower_select.py), the index algebra its
transformations share (affine, bounded_index, settle, hoist, int_ranges, reduction_names) and the
backend-neutral transformations of a kernel program (fold_indices, in_place, half_activations, derived_weights,
stored_values)."""
