# A user port in the style of the CRAN `attention` package's convention (written for these tests,
# not derived from our port): masked scores are filled with one large negative constant before the
# softmax (a masked_fill), so a query whose mask removes every key has equal scores everywhere and
# gets uniform weights 1/n_k, its output the mean of the value rows. It declares so; the suite then
# judges those rows against the uniform convention, and every other row exactly as for any port.
attention_ports <- list(
  operations = c("scaled_dot_product_attention", "self_attention", "multi_head_attention"),
  masked_query = "uniform"
)

MASK_FILL <- -1e9

row_softmax <- function(s) {
  e <- exp(s - apply(s, 1, max))
  e / rowSums(e)
}

# q: n_q x d_k, k: n_k x d_k, v: n_k x d_v, mask: n_q x n_k additive
scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) {
    s <- s + mask
    s[s == -Inf] <- MASK_FILL
  }
  w <- row_softmax(s)
  list(output = w %*% v, weights = w)
}

dense <- function(x, w, b) {
  y <- x %*% w
  if (is.null(b)) y else sweep(y, 2, b, "+")
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  q <- dense(x, w_q, b_q)
  k <- dense(x, w_k, b_k)
  v <- dense(x, w_v, b_v)
  r <- scaled_dot_product_attention(q, k, v, mask = mask, scale = scale)
  list(q = q, k = k, v = v, weights = r$weights, output = r$output)
}

multi_head_attention <- function(query, key, value, w_q, w_k, w_v, w_o, num_heads,
                                 b_q = NULL, b_k = NULL, b_v = NULL, b_o = NULL, mask = NULL) {
  q <- dense(query, w_q, b_q)
  k <- dense(key, w_k, b_k)
  v <- dense(value, w_v, b_v)
  dh <- ncol(q) %/% num_heads
  weights <- array(0, c(num_heads, nrow(q), nrow(k)))
  outs <- vector("list", num_heads)
  for (h in seq_len(num_heads)) {
    cols <- ((h - 1) * dh + 1):(h * dh)
    r <- scaled_dot_product_attention(q[, cols, drop = FALSE], k[, cols, drop = FALSE], v[, cols, drop = FALSE], mask = mask)
    weights[h, , ] <- r$weights
    outs[[h]] <- r$output
  }
  list(output = dense(do.call(cbind, outs), w_o, b_o), weights = weights)
}
