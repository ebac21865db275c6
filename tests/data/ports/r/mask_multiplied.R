# KNOWN-BAD test port (tests/test_diagnose.py): the mask multiplies the scores (zeroing the removed
# positions) instead of being added, so a removed key still gets weight exp(0). Queries the mask
# does not touch (the last row of a causal mask) are right.
attention_ports <- list(operations = c("scaled_dot_product_attention"))

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores * (mask == 0)  # BUG: the mask is additive (0 keeps, -Inf removes)
  e <- exp(scores - apply(scores, 1, max))
  weights <- e / rowSums(e)
  list(output = weights %*% v, weights = weights)
}
