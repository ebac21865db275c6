# A CORRECT user port (issue 19): the softmax in the log domain, w = exp(x - lse) with
# lse = m + log(rowSums(exp(x - m))), as a port that computes log-probabilities first writes it.
# `x - lse` rounds at the size of the score itself, so on logits of order 1e3 every weight carries
# a relative error of about u * |max score| (~1e-13): correct, and no porting mistake.
# tests/test_diagnose.py checks that no failure of it (if the bounds fail it at all) is blamed on a
# mistake.
attention_ports <- list(operations = c("softmax", "scaled_dot_product_attention", "self_attention"))

softmax <- function(x) {
  m <- apply(x, 1, max)
  lse <- m + log(rowSums(exp(x - m)))
  exp(x - lse)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores + mask
  dead <- apply(scores == -Inf, 1, all) # queries whose mask removes every key
  scores[dead, ] <- 0
  weights <- softmax(scores)
  weights[dead, ] <- 0
  list(output = weights %*% v, weights = weights)
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  project <- function(w, b) if (is.null(b)) x %*% w else sweep(x %*% w, 2, b, "+")
  q <- project(w_q, b_q)
  k <- project(w_k, b_k)
  v <- project(w_v, b_v)
  r <- scaled_dot_product_attention(q, k, v, mask = mask, scale = scale)
  list(q = q, k = k, v = v, weights = r$weights, output = r$output)
}
