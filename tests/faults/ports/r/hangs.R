# Fault: softmax never returns (it first leaves a flag file, when asked to, so that a test knows
# the call has started). Attention works. Used for timeouts, the give-up rule and orphans.

softmax <- function(x) {
  flag <- Sys.getenv("FAULT_FLAG")
  if (nzchar(flag)) file.create(flag)
  repeat {}
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(output = w %*% v, weights = w)
}
