# KNOWN-BAD test port (tests/test_messages.py): right numbers under names the contract does not
# use (out, w): not a partial port but an error naming the outputs it expected.
attention_ports <- list(operations = c("scaled_dot_product_attention"))

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  e <- exp(scores - apply(scores, 1, max))
  w <- e / rowSums(e)
  list(out = w %*% v, w = w)
}
