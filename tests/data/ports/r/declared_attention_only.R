# A port that declares what it offers (ports/CONTRACT.md, "Declaring what a port offers"). Like
# seed 003, it has a helper called `softmax` that normalises the WHOLE array, not each row: not the
# contract's softmax. Undeclared, it would be called for every softmax case and fail them all; the
# declaration makes those cases `missing`. It also declares NNlib's convention for a fully masked
# query (NaN), which the suite reads and reports.

attention_ports <- list(operations = c("scaled_dot_product_attention"), masked_query = "nan")

softmax <- function(x) {
  e <- exp(x - max(x))
  e / sum(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  w <- t(apply(s, 1, softmax))  # the helper, one row at a time
  list(output = w %*% v, weights = w)
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  stop("not declared, so never called")
}
