"""The NumPy reference implementation of attention: the oracle every port is checked against."""

from reference.attention import (
    AttentionResult,
    MultiHeadResult,
    SelfAttentionResult,
    heads_to_packed,
    multi_head_attention,
    scaled_dot_product_attention,
    self_attention,
    softmax,
)
from reference.masks import as_additive_mask, causal_mask, key_padding_mask

__version__ = "1.0.0"

__all__ = [
    "AttentionResult",
    "MultiHeadResult",
    "SelfAttentionResult",
    "as_additive_mask",
    "causal_mask",
    "heads_to_packed",
    "key_padding_mask",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "self_attention",
    "softmax",
]
