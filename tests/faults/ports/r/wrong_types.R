# Fault: results of the wrong R type where the contract wants doubles: softmax returns integers,
# attention returns logical weights. Each is an error naming the output.

softmax <- function(x) {
  y <- exp(x - apply(x, 1, max))
  y <- y / rowSums(y)
  storage.mode(y) <- "integer"
  y
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(output = w %*% v, weights = w > 0.5)
}
