"""torch's fused inference kernels, which dynamo keeps whole (TransformerEncoderLayer's fast path under
no_grad), written as the compositions they stand for."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call
from luminal.torch.registry import translates


def _self_attention(x, heads: int, qkv_weight, qkv_bias, proj_weight, proj_bias):
    """Multi-head self-attention of [batch, seq, embed] with packed q/k/v projections (torch's layout)."""
    b, s, e = x.shape
    q, k, v = F.linear(x, qkv_weight, qkv_bias).reshape(b, s, 3, heads, e // heads).permute(2, 0, 3, 1, 4)
    attended = F.scaled_dot_product_attention(q, k, v)
    return F.linear(attended.transpose(1, 2).reshape(b, s, e), proj_weight, proj_bias)


@translates("aten._transformer_encoder_layer_fwd")
def transformer_encoder_layer(c: Call):
    """torch.nn.TransformerEncoderLayer(batch_first=True) in inference: post-norm x = norm1(x + attn(x)),
    x = norm2(x + ff(x)); pre-norm (norm_first) x = x + attn(norm1(x)), x = x + ff(norm2(x))."""
    if c.get("mask") is not None:
        raise c.unsupported("an attention or padding mask on the fused encoder layer is not supported")
    x, e, eps = c["src"], c["embed_dim"], c["eps"]
    activation = F.gelu if c["use_gelu"] else F.relu

    def norm1(t):
        return F.layer_norm(t, [e], c["norm_weight_1"], c["norm_bias_1"], eps)

    def norm2(t):
        return F.layer_norm(t, [e], c["norm_weight_2"], c["norm_bias_2"], eps)

    def attend(t):
        return _self_attention(t, c["num_heads"], c["qkv_weight"], c["qkv_bias"], c["proj_weight"], c["proj_bias"])

    def feed_forward(t):
        hidden = activation(F.linear(t, c["ffn_weight_1"], c["ffn_bias_1"]))
        return F.linear(hidden, c["ffn_weight_2"], c["ffn_bias_2"])

    if c["norm_first"]:
        x = F.add(x, attend(norm1(x)))
        return F.add(x, feed_forward(norm2(x)))
    x = norm1(F.add(x, attend(x)))
    return norm2(F.add(x, feed_forward(x)))
