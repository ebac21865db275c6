# Fault: a port that leaves its own (broken) rowSums, softmax and apply in R's global
# environment, where a port sourced with globalenv() as its parent (as our adapter once did) would
# find them before base's. Neither this port nor any other may be affected: each port has its own
# R, and a port's lookups go to its own definitions, then stats, utils and base.

assign("rowSums", function(...) stop("the global rowSums left by pollutes_globalenv.R"), envir = globalenv())
assign("apply", function(...) stop("the global apply left by pollutes_globalenv.R"), envir = globalenv())
assign("softmax", function(x) stop("the global softmax left by pollutes_globalenv.R"), envir = globalenv())

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
  s <- tcrossprod(q, k) * scale
  if (!is.null(mask)) s <- s + mask
  w <- softmax(s)
  # what this port's functions see first: stats (median) and utils (head) exports, base (rowSums)
  list(output = w %*% v, weights = w, median_is_stats = as.double(identical(median, stats::median)),
       head_is_utils = as.double(identical(head, utils::head)),
       rowsums_is_base = as.double(identical(rowSums, base::rowSums)),
       sees_the_bridge = as.double(exists(".ap_call")))  # the worker's own R functions: out of reach
}
