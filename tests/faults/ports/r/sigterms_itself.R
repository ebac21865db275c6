# Fault: softmax sends SIGTERM to its own process. Only that case fails; attention still runs.

softmax <- function(x) {
  tools::pskill(Sys.getpid(), tools::SIGTERM)
  Sys.sleep(30)
  x
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(output = w %*% v, weights = w)
}
