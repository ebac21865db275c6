# A user's R port of softmax and scaled dot-product attention, written from ports/CONTRACT.md
# (not from our port): used to check an installed attention-ports on someone else's code.
attention_ports <- list(operations = c("softmax", "scaled_dot_product_attention"))

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))  # each row's maximum; an all -Inf row gives NaN, as it should
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- scale * (q %*% t(k))
  if (!is.null(mask)) scores <- scores + mask
  dead <- apply(scores == -Inf, 1, all)  # queries whose mask removes every key
  scores[dead, ] <- 0
  weights <- softmax(scores)
  weights[dead, ] <- 0
  list(output = weights %*% v, weights = weights)
}
