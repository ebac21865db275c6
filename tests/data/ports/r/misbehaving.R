# Ports that run but misbehave in ways the adapter must report clearly.

# Succeeds, with a warning along the way: the result is used and the warning is re-issued.
softmax <- function(x) {
  warning("softmax: shifting rows by their maximum")
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

.check_tokens <- function(m, name) {
  if (nrow(m) > 2) stop(sprintf("%s has %d tokens (%d x %d); this port handles at most 2", name, nrow(m), nrow(m), ncol(m)))
  invisible(m)
}

# Warns, then fails two calls deep: the error names the failing call and the call stack.
scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  warning("about to check the tokens")
  .check_tokens(q, "q")
  stop("unreachable for more than two tokens")
}

# Returns an unnamed list.
self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  list(x %*% w_q, x %*% w_k)
}

# Returns a string.
multi_head_attention <- function(query, key, value, w_q, w_k, w_v, w_o, num_heads,
                                 b_q = NULL, b_k = NULL, b_v = NULL, b_o = NULL, mask = NULL) {
  "not implemented yet"
}
