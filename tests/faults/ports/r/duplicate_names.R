# Fault: attention returns `output` twice, a wrong one first: list(output = WRONG, weights = w,
# output = RIGHT). R's own `$output` reads the first; a loop over the list sees the last. Refused,
# naming the duplicate.

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  w <- softmax(s)
  list(output = 0 * (w %*% v), weights = w, output = w %*% v)
}
