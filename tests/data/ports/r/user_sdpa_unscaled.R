# A realistic porting mistake: the scale is ignored (every case with d_k > 1 or scale != 1 fails).
attention_ports <- list(operations = c("softmax", "scaled_dot_product_attention"))

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))  # each row's maximum; an all -Inf row gives NaN, as it should
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  scale <- 1  # BUG: ignores the scale, so 1/sqrt(d_k) is never applied
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores + mask
  dead <- apply(scores == -Inf, 1, all)  # queries whose mask removes every key
  scores[dead, ] <- 0
  weights <- softmax(scores)
  weights[dead, ] <- 0
  list(output = weights %*% v, weights = weights)
}
