# Fault: softmax ends the R session with base::quit(status = 3), which the worker cannot disable
# (a bare quit() is replaced by an error). Only that case fails; attention still runs.

softmax <- function(x) base::quit(save = "no", status = 3)

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(output = w %*% v, weights = w)
}
