# KNOWN-BAD test port (tests/test_diagnose.py): attention written as a loop over queries, ported
# from 0-based code that read `weights[i + 1]` for the i-th output: each output row takes the next
# query's weights (the last one its own). The weights themselves are right.
attention_ports <- list(operations = c("scaled_dot_product_attention"))

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores + mask
  e <- exp(scores - apply(scores, 1, max))
  weights <- e / rowSums(e)
  n_q <- nrow(q)
  output <- matrix(0, n_q, ncol(v))
  for (i in seq_len(n_q)) {
    output[i, ] <- weights[min(i + 1, n_q), ] %*% v  # BUG: i + 1 kept from the 0-based original
  }
  list(output = output, weights = weights)
}
