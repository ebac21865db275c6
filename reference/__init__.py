"""The NumPy reference implementation of attention: the oracle every port is checked against.

Shipped as ``attention_ports.reference`` (the repository's top-level ``reference/`` folder, mapped into
the package by pyproject.toml). It sits just above ``core``: it may import ``attention_ports.core``
(``paths``, for the sentiment data) and nothing else of the project.
"""

from attention_ports.reference.activations import gelu
from attention_ports.reference.attention import (
    AttentionResult,
    MultiHeadResult,
    SelfAttentionResult,
    heads_to_packed,
    multi_head_attention,
    scaled_dot_product_attention,
    self_attention,
    softmax,
)
from attention_ports.reference.classifier import (
    ClassifierForward,
    ClassifierStep,
    ClassifierTraining,
    classifier_forward,
    classifier_loss_and_grads,
    classifier_step,
    classifier_train,
    init_classifier_params,
    pack_dataset,
    train_classifier,
    unpack_dataset,
)
from attention_ports.reference.losses import lm_loss
from attention_ports.reference.masks import as_additive_mask, causal_mask, key_padding_mask
from attention_ports.reference.norms import layer_norm, rms_norm
from attention_ports.reference.optim import AdamWStep, adamw_step
from attention_ports.reference.positions import PAIRINGS, rotary_embedding, sinusoidal_positions
from attention_ports.reference.transformer import decoder_block, feed_forward, gpt_forward
from attention_ports.reference.transformer_grads import gpt_grads
from attention_ports.reference.transformer_train import gpt_train

__version__ = "1.0.0"

__all__ = [
    "PAIRINGS",
    "AdamWStep",
    "AttentionResult",
    "ClassifierForward",
    "ClassifierStep",
    "ClassifierTraining",
    "MultiHeadResult",
    "SelfAttentionResult",
    "adamw_step",
    "as_additive_mask",
    "causal_mask",
    "classifier_forward",
    "classifier_loss_and_grads",
    "classifier_step",
    "classifier_train",
    "decoder_block",
    "feed_forward",
    "gelu",
    "gpt_forward",
    "gpt_grads",
    "gpt_train",
    "heads_to_packed",
    "init_classifier_params",
    "key_padding_mask",
    "layer_norm",
    "lm_loss",
    "multi_head_attention",
    "pack_dataset",
    "rms_norm",
    "rotary_embedding",
    "scaled_dot_product_attention",
    "self_attention",
    "sinusoidal_positions",
    "softmax",
    "train_classifier",
    "unpack_dataset",
]
