# KNOWN-BAD test port (tests/test_diagnose.py): a decoder's attention that builds its own causal
# mask whenever it is given one (ignoring the mask's values) and builds it off by one: each query
# also sees the next key (`col > row + 1` where `col > row` is meant).
attention_ports <- list(operations = c("scaled_dot_product_attention"))

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores[col(scores) > row(scores) + 1] <- -Inf  # BUG: + 1
  e <- exp(scores - apply(scores, 1, max))
  weights <- e / rowSums(e)
  list(output = weights %*% v, weights = weights)
}
