# Fault: softmax crashes R with a real segmentation fault (unbounded recursion once R's own
# expression limit is lifted overflows the C stack). Only that case fails; attention still runs.

softmax <- function(x) {
  options(expressions = 500000)
  deeper <- function(n) deeper(n + 1) + 1
  deeper(0)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(output = w %*% v, weights = w)
}
