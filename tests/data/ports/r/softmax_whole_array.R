# KNOWN-BAD user port: its softmax helper normalises over the WHOLE matrix, as seed 003's published
# `softmax(x)` does (`exp.(x) ./ sum(exp.(x))`; tests/data/ports/julia/seed003_scale_bug.jl keeps it
# verbatim). Everything else follows ports/CONTRACT.md. A vector passes (one row is the whole
# array); a matrix with more than one row does not, and tests/test_diagnose.py checks the failure
# says so in R's terms.
attention_ports <- list(operations = c("softmax", "scaled_dot_product_attention"))

softmax <- function(x) {
  e <- exp(x - max(x)) # THE BUG: one maximum and one sum for the whole matrix
  e / sum(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores + mask
  weights <- softmax(scores)
  list(output = weights %*% v, weights = weights)
}
