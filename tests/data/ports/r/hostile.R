# A port that misbehaves at the level of the R session: the adapter must survive all of it.

warning("this port warns while it is being loaded")

# Infinite recursion: R's own "evaluation nested too deeply" error, not a crash.
softmax <- function(x) softmax(x)

# Ending the session would end the Python process that embeds R: quit()/q() are disabled.
scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  quit(save = "no")
}

# Printing is fine (it goes to stderr); the result is correct.
self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  print("hello from R")
  q <- x %*% w_q
  k <- x %*% w_k
  v <- x %*% w_v
  s <- tcrossprod(q, k) * (if (is.null(scale)) 1 / sqrt(ncol(q)) else scale)
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(q = q, k = k, v = v, weights = w, output = w %*% v)
}
