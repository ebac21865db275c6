# Attention forward operations in base R: the project's own R port.
#
# Layout (ports/CONTRACT.md): tokens are rows (n x d), projections are d_in x d_out and applied as
# x %*% w, biases are plain vectors, scores/weights are n_q x n_k with rows summing to 1, and
# multi-head weights are an array of dim c(num_heads, n_q, n_k). Masks are additive (0 keeps,
# -Inf removes); a logical mask (TRUE = keep) is accepted too and converted.
#
# Every check stops with a message that names the argument and prints the sizes involved.

.dims <- function(x) {
  d <- dim(x)
  if (is.null(d)) sprintf("a vector of length %d", length(x)) else paste(d, collapse = " x ")
}

.check_matrix <- function(x, name, fn) {
  if (!is.numeric(x) || !is.matrix(x)) {
    stop(sprintf("%s: %s must be a numeric matrix (tokens x features); got %s %s",
                 fn, name, class(x)[1L], .dims(x)), call. = FALSE)
  }
  if (!all(is.finite(x))) {
    bad <- which(!is.finite(x), arr.ind = TRUE)[1L, ]
    stop(sprintf("%s: %s (%s) must be finite; found %s at [%s]",
                 fn, name, .dims(x), format(x[bad[1L], bad[2L]]), paste(bad, collapse = ", ")),
         call. = FALSE)
  }
  invisible(x)
}

.as_additive_mask <- function(mask, n_q, n_k, fn) {
  if (is.null(mask)) return(NULL)
  if (!is.matrix(mask) || !identical(dim(mask), c(n_q, n_k))) {
    stop(sprintf("%s: mask must be an n_q x n_k = %d x %d matrix; got %s",
                 fn, n_q, n_k, .dims(mask)), call. = FALSE)
  }
  if (is.logical(mask)) {
    if (anyNA(mask)) stop(sprintf("%s: logical mask (%s) contains NA", fn, .dims(mask)), call. = FALSE)
    return(ifelse(mask, 0, -Inf))
  }
  if (!is.numeric(mask) || anyNA(mask) || any(mask == Inf)) {
    stop(sprintf("%s: mask (%s) must be numeric with finite values or -Inf (no NaN / +Inf)",
                 fn, .dims(mask)), call. = FALSE)
  }
  mask
}

# Row-wise numerically stable softmax. A row that is entirely -Inf comes back NaN (0/0).
softmax <- function(x) {
  if (!is.numeric(x)) stop(sprintf("softmax: x must be numeric; got %s", class(x)[1L]), call. = FALSE)
  if (length(x) == 0L) stop(sprintf("softmax: x is empty (%s)", .dims(x)), call. = FALSE)
  if (anyNA(x) || any(x == Inf)) {
    stop(sprintf("softmax: x (%s) contains NaN or +Inf", .dims(x)), call. = FALSE)
  }
  if (is.null(dim(x))) return(as.vector(softmax(matrix(x, nrow = 1L))))
  if (!is.matrix(x)) stop(sprintf("softmax: x must be a matrix; got an array %s", .dims(x)), call. = FALSE)
  peak <- x[cbind(seq_len(nrow(x)), max.col(x, ties.method = "first"))]
  e <- exp(x - peak) # peak recycles down the columns: row i minus its own maximum
  e / rowSums(e) # an all -Inf row: -Inf - -Inf = NaN, so the row is NaN
}

.default_scale <- function(d_k) 1 / sqrt(d_k)

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  fn <- "scaled_dot_product_attention"
  .check_matrix(q, "q", fn)
  .check_matrix(k, "k", fn)
  .check_matrix(v, "v", fn)
  sizes <- sprintf("q %s, k %s, v %s", .dims(q), .dims(k), .dims(v))
  if (ncol(q) != ncol(k)) {
    stop(sprintf("%s: q and k need the same feature size d_k; got %s", fn, sizes), call. = FALSE)
  }
  if (nrow(k) != nrow(v)) {
    stop(sprintf("%s: k and v need the same number of tokens n_k; got %s", fn, sizes), call. = FALSE)
  }
  if (is.null(scale)) {
    scale <- .default_scale(ncol(q))
  } else if (!is.numeric(scale) || length(scale) != 1L || !is.finite(scale)) {
    stop(sprintf("%s: scale must be one finite number or NULL; got %s", fn, format(scale)), call. = FALSE)
  }

  scores <- tcrossprod(q, k) * scale # n_q x n_k
  mask <- .as_additive_mask(mask, nrow(q), nrow(k), fn)
  if (!is.null(mask)) scores <- scores + mask
  dead <- rowSums(scores > -Inf) == 0L # queries the mask left with nothing to attend to
  weights <- softmax(scores)
  weights[dead, ] <- 0
  list(output = weights %*% v, weights = weights)
}

.project <- function(x, w, b, name, fn) {
  wname <- paste0("w_", name)
  .check_matrix(w, wname, fn)
  if (nrow(w) != ncol(x)) {
    stop(sprintf("%s: %s must be d_in x d_out with d_in = ncol(x); got x %s, %s %s",
                 fn, wname, .dims(x), wname, .dims(w)), call. = FALSE)
  }
  out <- x %*% w
  if (is.null(b)) return(out)
  bname <- paste0("b_", name)
  if (!is.numeric(b) || length(b) != ncol(w) || length(dim(b)) > 1L) {
    stop(sprintf("%s: %s must be a numeric vector of length %d (ncol(%s)); got %s",
                 fn, bname, ncol(w), wname, .dims(b)), call. = FALSE)
  }
  if (!all(is.finite(b))) stop(sprintf("%s: %s must be finite", fn, bname), call. = FALSE)
  sweep(out, 2L, as.vector(b), "+")
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL,
                           mask = NULL, scale = NULL) {
  fn <- "self_attention"
  .check_matrix(x, "x", fn)
  q <- .project(x, w_q, b_q, "q", fn)
  k <- .project(x, w_k, b_k, "k", fn)
  v <- .project(x, w_v, b_v, "v", fn)
  if (ncol(q) != ncol(k)) {
    stop(sprintf("%s: w_q and w_k must project to the same d_k; got w_q %s, w_k %s",
                 fn, .dims(w_q), .dims(w_k)), call. = FALSE)
  }
  att <- scaled_dot_product_attention(q, k, v, mask = mask, scale = scale)
  list(q = q, k = k, v = v, weights = att$weights, output = att$output)
}

# num_heads as an integer, or an error: heads are contiguous blocks of d_model / num_heads features
# (the multi-head operation here, the decoder block's attention in transformer.R).
.check_num_heads <- function(num_heads, d_model, fn) {
  if (!is.numeric(num_heads) || length(num_heads) != 1L || !is.finite(num_heads) ||
        num_heads != round(num_heads) || num_heads < 1 || d_model %% num_heads != 0) {
    stop(sprintf("%s: num_heads = %s must be a positive divisor of d_model = %d",
                 fn, format(num_heads), d_model), call. = FALSE)
  }
  as.integer(num_heads)
}

multi_head_attention <- function(query, key, value, w_q, w_k, w_v, w_o, num_heads,
                                 b_q = NULL, b_k = NULL, b_v = NULL, b_o = NULL, mask = NULL) {
  fn <- "multi_head_attention"
  .check_matrix(query, "query", fn)
  .check_matrix(key, "key", fn)
  .check_matrix(value, "value", fn)
  d_model <- ncol(query)
  if (ncol(key) != d_model || ncol(value) != d_model || nrow(key) != nrow(value)) {
    stop(sprintf(paste0("%s: query, key and value need the same d_model, key and value the same n_k; ",
                        "got query %s, key %s, value %s"),
                 fn, .dims(query), .dims(key), .dims(value)), call. = FALSE)
  }
  num_heads <- .check_num_heads(num_heads, d_model, fn)
  ws <- list(w_q = w_q, w_k = w_k, w_v = w_v, w_o = w_o)
  for (name in names(ws)) {
    if (!identical(as.integer(dim(ws[[name]])), c(d_model, d_model))) {
      stop(sprintf("%s: %s must be d_model x d_model = %d x %d; got %s",
                   fn, name, d_model, d_model, .dims(ws[[name]])), call. = FALSE)
    }
  }
  d_head <- d_model %/% num_heads
  n_q <- nrow(query)
  n_k <- nrow(key)
  mask <- .as_additive_mask(mask, n_q, n_k, fn)

  q <- .project(query, w_q, b_q, "q", fn)
  k <- .project(key, w_k, b_k, "k", fn)
  v <- .project(value, w_v, b_v, "v", fn)
  heads <- lapply(seq_len(num_heads), function(i) {
    cols <- ((i - 1L) * d_head + 1L):(i * d_head)
    scaled_dot_product_attention(q[, cols, drop = FALSE], k[, cols, drop = FALSE],
                                 v[, cols, drop = FALSE], mask = mask)
  })
  concat <- do.call(cbind, lapply(heads, `[[`, "output")) # n_q x d_model, heads in order
  weights <- array(unlist(lapply(heads, `[[`, "weights"), use.names = FALSE),
                   dim = c(n_q, n_k, num_heads))
  list(output = .project(concat, w_o, b_o, "o", fn), weights = aperm(weights, c(3L, 1L, 2L)))
}
