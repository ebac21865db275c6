# The transformer in base R: GPT-2's pre-norm decoder (the project's own R port).
#
# Layout (ports/CONTRACT.md, "The transformer: GPT-2's decoder"): tokens are rows (n x d), weights
# are d_in x d_out applied as x %*% w + b, biases are plain vectors. gpt_forward's per-block
# parameters are stacked along a first block axis (w_q[b, , ] is block b's d x d matrix, ln1_w[b, ]
# its vector) and its token ids are 1-based. The pieces are this port's own, from its other files
# (they share one environment): layer_norm (norms.R), gelu (activations.R), and from attention.R
# scaled_dot_product_attention, .project (x %*% w + b, checked), .check_matrix, .check_num_heads
# and .dims.

.BLOCK_PARAMS <- c("ln1_w", "ln1_b", "w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o",
                   "ln2_w", "ln2_b", "w_1", "b_1", "w_2", "b_2")
.GPT_PARAMS <- c("wte", "wpe", .BLOCK_PARAMS, "lnf_w", "lnf_b", "w_head")

# Each block member's shape (a single number: a vector of that length), from the width d and the
# feed-forward width d_ff.
.block_shapes <- function(d, d_ff) {
  shapes <- list(w_q = c(d, d), w_k = c(d, d), w_v = c(d, d), w_o = c(d, d),
                 w_1 = c(d, d_ff), b_1 = d_ff, w_2 = c(d_ff, d))
  for (m in c("ln1_w", "ln1_b", "b_q", "b_k", "b_v", "b_o", "ln2_w", "ln2_b", "b_2")) shapes[[m]] <- d
  shapes
}

# params must be a list holding every one of `members` as finite numbers, each of the shape
# `shapes` gives it (where given); `what` says what the sizes are, for the message.
# "w_q 2 x 16 x 16, w_1 absent" for a message; what params is, when it is not a list.
.member_dims <- function(params, members) {
  if (!is.list(params)) return(sprintf("params %s %s", class(params)[1L], .dims(params)))
  paste(vapply(members, function(m) {
    if (is.null(params[[m]])) paste(m, "absent") else paste(m, .dims(params[[m]]))
  }, ""), collapse = ", ")
}

.check_params <- function(params, members, shapes, what, fn) {
  if (!is.list(params)) {
    stop(sprintf("%s: params must be a named list of %s; got %s", fn, paste(members, collapse = ", "),
                 class(params)[1L]), call. = FALSE)
  }
  absent <- setdiff(members, names(params))
  if (length(absent)) {
    stop(sprintf("%s: params lacks %s", fn, paste(absent, collapse = ", ")), call. = FALSE)
  }
  for (m in members) {
    p <- params[[m]]
    if (!is.numeric(p) || !all(is.finite(p))) {
      stop(sprintf("%s: params$%s must hold finite numbers; got %s %s", fn, m, class(p)[1L], .dims(p)),
           call. = FALSE)
    }
    want <- shapes[[m]]
    got <- if (is.null(dim(p))) length(p) else dim(p)
    if (!is.null(want) && !identical(as.integer(got), as.integer(want))) {
      shape <- if (length(want) == 1L) sprintf("a vector of length %d", want) else paste(want, collapse = " x ")
      stop(sprintf("%s: params$%s must be %s (%s); got %s", fn, m, shape, what, .dims(p)), call. = FALSE)
    }
  }
  invisible(params)
}

# Query i (row i) attends to keys 1..i: the keys after it are removed (-Inf) before the softmax.
.causal_mask <- function(n) {
  mask <- matrix(0, n, n)
  mask[upper.tri(mask)] <- -Inf
  mask
}

# Causal multi-head self-attention of the normalised a (n x d) with block parameters p: heads are
# contiguous blocks of d_head = d / num_heads projected features, each scaled by 1/sqrt(d_head)
# (scaled_dot_product_attention's default for d_head-wide queries), concatenated in order, then
# projected by w_o. Written here on the port's scaled dot-product attention rather than through its
# multi-head operation, which also builds the per-head weights the block does not return.
.causal_self_attention <- function(a, p, num_heads, fn) {
  d_head <- ncol(a) %/% num_heads
  q <- .project(a, p$w_q, p$b_q, "q", fn)  # n x d
  k <- .project(a, p$w_k, p$b_k, "k", fn)  # n x d
  v <- .project(a, p$w_v, p$b_v, "v", fn)  # n x d
  causal <- .causal_mask(nrow(a))
  heads <- lapply(seq_len(num_heads), function(i) {
    cols <- ((i - 1L) * d_head + 1L):(i * d_head)  # head i's features
    scaled_dot_product_attention(q[, cols, drop = FALSE], k[, cols, drop = FALSE], v[, cols, drop = FALSE],
                                 mask = causal)$output  # n x d_head
  })
  .project(do.call(cbind, heads), p$w_o, p$b_o, "o", fn)  # n x d
}

# One pre-norm block on x (n x d), its parameters already checked: both residuals, the layer norms
# before each sublayer (GPT-2), not after.
.block <- function(x, p, num_heads, eps, approximate, fn) {
  h <- x + .causal_self_attention(layer_norm(x, p$ln1_w, p$ln1_b, eps), p, num_heads, fn)  # n x d
  h + feed_forward(layer_norm(h, p$ln2_w, p$ln2_b, eps), p$w_1, p$b_1, p$w_2, p$b_2, approximate)
}

feed_forward <- function(x, w_1, b_1, w_2, b_2, approximate = "none") {
  fn <- "feed_forward"
  .check_matrix(x, "x", fn)
  hidden <- gelu(.project(x, w_1, b_1, "1", fn), approximate = approximate)  # n x d_ff
  y <- .project(hidden, w_2, b_2, "2", fn)                                    # n x d
  if (ncol(y) != ncol(x)) {
    stop(sprintf("%s: w_2 must be d_ff x d, d = ncol(x) = %d; got w_2 %s", fn, ncol(x), .dims(w_2)),
         call. = FALSE)
  }
  y
}

decoder_block <- function(x, params, num_heads, eps = 1e-5, approximate = "none") {
  fn <- "decoder_block"
  .check_matrix(x, "x", fn)
  d <- ncol(x)
  num_heads <- .check_num_heads(num_heads, d, fn)
  if (is.null(eps)) eps <- 1e-5  # an absent option is NULL (ports/CONTRACT.md)
  if (!is.list(params) || !is.numeric(params$w_1) || !is.matrix(params$w_1)) {
    stop(sprintf("%s: params must be a named list with w_1 a d x d_ff matrix; got %s",
                 fn, .member_dims(params, "w_1")), call. = FALSE)
  }
  d_ff <- ncol(params$w_1)
  .check_params(params, .BLOCK_PARAMS, .block_shapes(d, d_ff), sprintf("d = ncol(x) = %d, d_ff = %d", d, d_ff), fn)
  .block(x, params, num_heads, eps, approximate, fn)
}

# Block b's parameters out of the stacks: w_q[b, , ] as a d x d matrix (kept a matrix when an
# extent is 1), ln1_w[b, ] as a vector.
.layer_of <- function(stack, b) {
  if (length(dim(stack)) == 3L) matrix(stack[b, , ], dim(stack)[2L], dim(stack)[3L]) else stack[b, ]
}

# The GPT's inputs checked (the forward and its gradient share them): params against the shapes
# that wte, w_q, w_1 and wpe give, the tokens, num_heads and eps (NULL: 1e-5). Returns n_layer,
# num_heads as an integer and eps.
.check_gpt <- function(tokens, params, num_heads, eps, fn) {
  if (!is.list(params) || !is.numeric(params$wte) || !is.matrix(params$wte) ||
        length(dim(params$w_q)) != 3L || length(dim(params$w_1)) != 3L) {
    stop(sprintf(paste0("%s: params must be a named list with wte (vocab x d) and the blocks' ",
                        "weights stacked block first (w_q: n_layer x d x d, w_1: n_layer x d x d_ff); ",
                        "got %s"),
                 fn, .member_dims(params, c("wte", "w_q", "w_1"))), call. = FALSE)
  }
  vocab <- nrow(params$wte)
  d <- ncol(params$wte)
  n_layer <- dim(params$w_q)[1L]
  d_ff <- dim(params$w_1)[3L]
  shapes <- c(lapply(.block_shapes(d, d_ff), function(s) c(n_layer, s)),
              list(wte = c(vocab, d), lnf_w = d, lnf_b = d, w_head = c(d, vocab)))
  .check_params(params, .GPT_PARAMS, shapes,
                sprintf("vocab = %d, d = %d, n_layer = %d, d_ff = %d; block axis first", vocab, d, n_layer, d_ff), fn)
  if (!is.matrix(params$wpe) || ncol(params$wpe) != d) {
    stop(sprintf("%s: params$wpe must be n_ctx x d with d = %d; got %s", fn, d, .dims(params$wpe)), call. = FALSE)
  }
  n <- length(tokens)
  if (!is.numeric(tokens) || n == 0L || length(dim(tokens)) > 1L || anyNA(tokens) ||
        any(tokens != round(tokens)) || any(tokens < 1 | tokens > vocab)) {
    stop(sprintf("%s: tokens must be a non-empty vector of 1-based token ids in 1..%d (vocab = nrow(wte)); got %s",
                 fn, vocab, paste(format(utils::head(tokens, 8L)), collapse = " ")), call. = FALSE)
  }
  if (n > nrow(params$wpe)) {
    stop(sprintf("%s: %d tokens, but wpe has positions for n_ctx = %d", fn, n, nrow(params$wpe)), call. = FALSE)
  }
  num_heads <- .check_num_heads(num_heads, d, fn)
  if (is.null(eps)) eps <- 1e-5  # an absent option is NULL (ports/CONTRACT.md)
  list(n_layer = n_layer, num_heads = num_heads, eps = eps)
}

gpt_forward <- function(tokens, params, num_heads, eps = 1e-5, approximate = "none") {
  fn <- "gpt_forward"
  checked <- .check_gpt(tokens, params, num_heads, eps, fn)
  n_layer <- checked$n_layer
  num_heads <- checked$num_heads
  eps <- checked$eps
  n <- length(tokens)

  x <- params$wte[tokens, , drop = FALSE] + params$wpe[seq_len(n), , drop = FALSE]  # n x d
  for (b in seq_len(n_layer)) {
    x <- .block(x, lapply(params[.BLOCK_PARAMS], .layer_of, b), num_heads, eps, approximate, fn)
  }
  layer_norm(x, params$lnf_w, params$lnf_b, eps) %*% params$w_head  # n x vocab: every position's logits
}
