"""Neural-network operators: convolution, normalization, pooling, attention, dropout."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call, Unavailable
from luminal.torch.registry import translates

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d}


@translates("aten.convolution")
def convolution(c: Call):
    x, w = c["input"], c["weight"]
    nd = w.ndim - 2
    stride, padding, dilation = list(c["stride"]), list(c["padding"]), list(c["dilation"])
    if c["transposed"]:
        if nd not in _CONV_TRANSPOSE:
            raise c.unsupported(f"transposed convolution over {nd} spatial dims is not supported")
        fn = _CONV_TRANSPOSE[nd]
        return fn(x, w, c.get("bias"), stride, padding, list(c["output_padding"]), c["groups"], dilation)
    if nd not in _CONV:
        raise c.unsupported(f"convolution over {nd} spatial dims is not supported")
    return _CONV[nd](x, w, c.get("bias"), stride, padding, dilation, c["groups"])


@translates("aten._native_batch_norm_legit_no_training")
def batch_norm_inference(c: Call):
    y = F.batch_norm(c["input"], c["running_mean"], c["running_var"], c.get("weight"), c.get("bias"), eps=c["eps"])
    return y, Unavailable("batch norm's saved mean"), Unavailable("batch norm's saved inverse std")


@translates("aten.native_layer_norm")
def layer_norm(c: Call):
    y = F.layer_norm(c["input"], list(c["normalized_shape"]), c.get("weight"), c.get("bias"), c["eps"])
    return y, Unavailable("layer norm's saved mean"), Unavailable("layer norm's saved inverse std")


@translates("aten.native_group_norm")
def group_norm(c: Call):
    y = F.group_norm(c["input"], c["group"], c.get("weight"), c.get("bias"), c["eps"])
    return y, Unavailable("group norm's saved mean"), Unavailable("group norm's saved inverse std")


def _stride(c: Call) -> list:
    # ATen's pooling stride defaults to [] which means "the kernel size"
    return list(c["stride"]) or list(c["kernel_size"])


@translates("aten.max_pool2d_with_indices", "aten.max_pool1d_with_indices")
def max_pool_with_indices(c: Call):
    pool = F.max_pool2d if c.name.startswith("aten.max_pool2d") else F.max_pool1d
    x = c["self"]
    y = pool(x, list(c["kernel_size"]), _stride(c), list(c["padding"]), list(c["dilation"]), bool(c["ceil_mode"]))
    return y, Unavailable("max pooling's indices")


@translates("aten.max_pool2d", "aten.max_pool1d")
def max_pool(c: Call):
    pool = F.max_pool2d if c.name.startswith("aten.max_pool2d") else F.max_pool1d
    x = c["self"]
    return pool(x, list(c["kernel_size"]), _stride(c), list(c["padding"]), list(c["dilation"]), bool(c["ceil_mode"]))


@translates("aten.avg_pool2d")
def avg_pool2d(c: Call):
    return F.avg_pool2d(
        c["self"],
        list(c["kernel_size"]),
        _stride(c),
        list(c["padding"]),
        bool(c["ceil_mode"]),
        bool(c["count_include_pad"]),
        c.get("divisor_override"),
    )


@translates("aten.avg_pool1d")
def avg_pool1d(c: Call):
    return F.avg_pool1d(
        c["self"],
        list(c["kernel_size"]),
        _stride(c),
        list(c["padding"]),
        bool(c["ceil_mode"]),
        bool(c["count_include_pad"]),
    )


@translates("aten._adaptive_avg_pool2d", "aten.adaptive_avg_pool2d")
def adaptive_avg_pool2d(c: Call):
    return F.adaptive_avg_pool2d(c["self"], list(c["output_size"]))


@translates("aten.adaptive_avg_pool1d")
def adaptive_avg_pool1d(c: Call):
    return F.adaptive_avg_pool1d(c["self"], list(c["output_size"]))


@translates("aten.scaled_dot_product_attention")
def scaled_dot_product_attention(c: Call):
    if c.get("dropout_p", 0.0):
        raise c.unsupported("dropout_p > 0 draws random numbers (inference graphs have none)")
    return F.scaled_dot_product_attention(
        c["query"],
        c["key"],
        c["value"],
        attn_mask=c.get("attn_mask"),
        is_causal=bool(c["is_causal"]),
        scale=c.get("scale"),
        enable_gqa=bool(c.get("enable_gqa", False)),
    )


@translates("aten.dropout")
def dropout(c: Call):
    if c["train"] and c["p"]:
        raise c.unsupported("dropout in training draws random numbers (inference graphs have none)")
    return c["input"]
