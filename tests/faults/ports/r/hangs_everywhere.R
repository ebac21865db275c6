# Fault: every operation hangs: a port can cost at most a few timeouts, then the rest fails at once.

softmax <- function(x) repeat {}
scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) repeat {}
self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) repeat {}
