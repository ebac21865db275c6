# A plausible port with one bug: the scores use k where they need t(k) (q %*% k instead of
# q %*% t(k)). It only runs when ncol(q) == nrow(k) (square inputs), and then gives wrong results.

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  scores <- (q %*% k) * scale # BUG: should be q %*% t(k)
  if (!is.null(mask)) scores <- scores + mask
  weights <- softmax(scores)
  list(output = weights %*% v, weights = weights)
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  q <- x %*% w_q
  k <- x %*% w_k
  v <- x %*% w_v
  if (!is.null(b_q)) q <- sweep(q, 2, b_q, "+")
  if (!is.null(b_k)) k <- sweep(k, 2, b_k, "+")
  if (!is.null(b_v)) v <- sweep(v, 2, b_v, "+")
  att <- scaled_dot_product_attention(q, k, v, mask = mask, scale = scale)
  list(q = q, k = k, v = v, weights = att$weights, output = att$output)
}
