# KNOWN-BAD test port (tests/test_diagnose.py): the mask argument is called attn_mask (PyTorch's
# name) where the contract calls it mask: every masked case fails in the call itself, and the
# message must show the port's signature, not the suite's own R frames.
attention_ports <- list(operations = c("scaled_dot_product_attention"))

scaled_dot_product_attention <- function(q, k, v, attn_mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(attn_mask)) scores <- scores + attn_mask
  e <- exp(scores - apply(scores, 1, max))
  weights <- e / rowSums(e)
  list(output = weights %*% v, weights = weights)
}
