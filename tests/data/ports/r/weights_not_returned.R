# A port that declares scaled dot-product attention and returns its output but not its weights
# (tests/test_messages.py, tests/test_verdict_agreement.py): the output is still judged (it is
# right), and the weights it owes and does not return fail, in every front end.
attention_ports <- list(operations = c("scaled_dot_product_attention"))

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores + mask
  e <- exp(scores - apply(scores, 1, max))
  weights <- e / rowSums(e)
  list(output = weights %*% v)
}
