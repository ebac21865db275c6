# Fault: softmax never returns (it first leaves a flag file, when asked to, so that a test knows
# the call has started). Attention works. Used for timeouts, the give-up rule and orphans.
# It waits rather than spins: a timeout kills the worker's process group whatever the worker
# does. The spinning R port is escapes_its_group.R (its attention, given up by a timeout).

softmax <- function(x) {
  flag <- Sys.getenv("FAULT_FLAG")
  if (nzchar(flag)) file.create(flag)
  repeat Sys.sleep(3600)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(output = w %*% v, weights = w)
}
