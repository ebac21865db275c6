# A partial test port (tests/test_diagnose.py): attention returns its output but not its weights.
# The output must still be judged (it is right); only the weights are missing.
attention_ports <- list(operations = c("scaled_dot_product_attention"))

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores + mask
  e <- exp(scores - apply(scores, 1, max))
  weights <- e / rowSums(e)
  list(output = weights %*% v)
}
