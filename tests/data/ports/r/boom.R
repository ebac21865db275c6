# A port whose softmax always fails. Attention does not call it (it normalises inline), so
# softmax cases error with R's message while every other operation still runs and passes.

softmax <- function(x) {
  stop("boom")
}

.normalise_rows <- function(s) {
  dead <- rowSums(s > -Inf) == 0
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  w[dead, ] <- 0
  w
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- tcrossprod(q, k) * scale
  if (!is.null(mask)) scores <- scores + mask
  weights <- .normalise_rows(scores)
  list(output = weights %*% v, weights = weights)
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  add <- function(m, b) if (is.null(b)) m else sweep(m, 2, b, "+")
  q <- add(x %*% w_q, b_q)
  k <- add(x %*% w_k, b_k)
  v <- add(x %*% w_v, b_v)
  att <- scaled_dot_product_attention(q, k, v, mask = mask, scale = scale)
  list(q = q, k = k, v = v, weights = att$weights, output = att$output)
}

multi_head_attention <- function(query, key, value, w_q, w_k, w_v, w_o, num_heads,
                                 b_q = NULL, b_k = NULL, b_v = NULL, b_o = NULL, mask = NULL) {
  add <- function(m, b) if (is.null(b)) m else sweep(m, 2, b, "+")
  q <- add(query %*% w_q, b_q)
  k <- add(key %*% w_k, b_k)
  v <- add(value %*% w_v, b_v)
  d_head <- ncol(q) / num_heads
  heads <- lapply(seq_len(num_heads), function(i) {
    cols <- ((i - 1) * d_head + 1):(i * d_head)
    scaled_dot_product_attention(q[, cols, drop = FALSE], k[, cols, drop = FALSE],
                                 v[, cols, drop = FALSE], mask = mask)
  })
  out <- add(do.call(cbind, lapply(heads, `[[`, "output")) %*% w_o, b_o)
  weights <- aperm(simplify2array(lapply(heads, `[[`, "weights")), c(3, 1, 2))
  list(output = out, weights = weights)
}
