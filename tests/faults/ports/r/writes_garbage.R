# Fault: a port that finds the worker's private reply pipe (its number is in the environment)
# and writes to it: plain garbage (softmax), a well-formed frame answering another request
# (self_attention), a frame announcing an absurd length (multi_head_attention). Each of those
# cases is an error and the worker is replaced; attention, which behaves, still passes.

.reply_pipe <- function() {
  fds <- as.integer(strsplit(Sys.getenv("ATTENTION_PORTS_WORKER_FDS"), ",")[[1L]])
  file(sprintf("/proc/self/fd/%d", fds[[2L]]), "wb")
}

.forge <- function(bytes) {
  con <- .reply_pipe()
  writeBin(bytes, con)
  close(con)
}

softmax <- function(x) {
  .forge(charToRaw("this is not a frame, just text a port wrote"))
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  e <- exp(s - apply(s, 1, max))
  w <- e / rowSums(e)
  list(output = w %*% v, weights = w)
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  # "APr1", id 999, a body of one byte "M" (a missing-operation reply): well formed, wrong id
  .forge(c(charToRaw("APr1"), as.raw(c(0xe7, 0x03, 0, 0, 0, 0, 0, 0)), as.raw(c(1, 0, 0, 0, 0, 0, 0, 0)), charToRaw("M")))
  stop("unreachable: the forged reply came first")
}

multi_head_attention <- function(query, key, value, w_q, w_k, w_v, w_o, num_heads,
                                 b_q = NULL, b_k = NULL, b_v = NULL, b_o = NULL, mask = NULL) {
  # "APr1", id 0, a body of 2^62 bytes: refused from its header, before anything is allocated
  .forge(c(charToRaw("APr1"), as.raw(rep(0, 8)), as.raw(c(0, 0, 0, 0, 0, 0, 0, 0x40))))
  Sys.sleep(30)
}
