# Fault: NA (R's missing value) where a number belongs. R's NA_real_ is not NaN (is.nan(NA) is
# FALSE): a NaN where the contract wants NaN (a fully masked softmax row) passes, an NA is an error
# naming the output and its 1-based position.

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  w <- softmax(s)
  out <- w %*% v
  w[nrow(w), 1] <- NA
  list(output = out, weights = w)
}
