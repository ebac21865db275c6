# A user's R port of GPT-2's decoder, written for these tests from ports/CONTRACT.md and the public
# description of nanoGPT's model.py (karpathy/nanoGPT), NOT from our ports: it checks that someone
# else's base-R formulation is judged without a false alarm (issue 18). Its choices differ from
# ours on purpose: rowMeans/sweep for the norm, gelu as x * pnorm(x), each head's scores masked
# with upper.tri(...) <- -Inf and normalised with apply(), the heads joined with do.call(cbind),
# the loss from a matrix index logits[cbind(i, targets)].
attention_ports <- list(
  operations = c("layer_norm", "gelu", "feed_forward", "decoder_block", "gpt_forward", "lm_loss")
)

# x: n x d, one token per row, normalised over its d features (biased variance, two passes).
layer_norm <- function(x, weight = NULL, bias = NULL, eps = NULL) {
  if (is.null(eps)) eps <- 1e-5
  xc <- sweep(x, 1, rowMeans(x))
  y <- xc / sqrt(rowMeans(xc^2) + eps)
  if (!is.null(weight)) y <- sweep(y, 2, weight, `*`)
  if (!is.null(bias)) y <- sweep(y, 2, bias, `+`)
  y
}

gelu <- function(x, approximate = "none") {
  if (is.null(approximate) || approximate == "none") {
    x * pnorm(x)
  } else if (approximate == "tanh") {
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
  } else {
    stop("gelu: approximate must be \"none\" or \"tanh\", got ", approximate)
  }
}

# Add a bias vector to every row.
add_row <- function(m, b) sweep(m, 2, b, `+`)

feed_forward <- function(x, w_1, b_1, w_2, b_2, approximate = "none") {
  add_row(gelu(add_row(x %*% w_1, b_1), approximate) %*% w_2, b_2)
}

# Causal multi-head self-attention of a (n x d): nanoGPT's CausalSelfAttention in base R.
causal_attention <- function(a, p, num_heads) {
  n <- nrow(a)
  d <- ncol(a)
  if (d %% num_heads != 0) stop("decoder_block: num_heads = ", num_heads, " does not divide d = ", d)
  hs <- d %/% num_heads
  q <- add_row(a %*% p$w_q, p$b_q)
  k <- add_row(a %*% p$w_k, p$b_k)
  v <- add_row(a %*% p$w_v, p$b_v)
  heads <- lapply(seq_len(num_heads), function(h) {
    cols <- ((h - 1) * hs + 1):(h * hs)
    att <- q[, cols, drop = FALSE] %*% t(k[, cols, drop = FALSE]) / sqrt(hs)
    att[upper.tri(att)] <- -Inf                      # query i sees keys 1..i
    att <- t(apply(att, 1, function(r) { e <- exp(r - max(r)); e / sum(e) }))
    if (n == 1) att <- matrix(att, 1, 1)             # apply() drops a 1 x 1 to a vector
    att %*% v[, cols, drop = FALSE]
  })
  add_row(do.call(cbind, heads) %*% p$w_o, p$b_o)
}

decoder_block <- function(x, params, num_heads, eps = NULL, approximate = "none") {
  p <- params
  h <- x + causal_attention(layer_norm(x, p$ln1_w, p$ln1_b, eps), p, num_heads)
  h + feed_forward(layer_norm(h, p$ln2_w, p$ln2_b, eps), p$w_1, p$b_1, p$w_2, p$b_2, approximate)
}

# Block b's parameters: slice b of every stacked array (the block axis is the first one).
block_params <- function(params, b) {
  mats <- c("w_q", "w_k", "w_v", "w_o", "w_1", "w_2")
  vecs <- c("ln1_w", "ln1_b", "b_q", "b_k", "b_v", "b_o", "ln2_w", "ln2_b", "b_1", "b_2")
  out <- list()
  for (s in mats) {
    a <- params[[s]]
    out[[s]] <- matrix(a[b, , ], dim(a)[2], dim(a)[3])
  }
  for (s in vecs) out[[s]] <- params[[s]][b, ]
  out
}

gpt_forward <- function(tokens, params, num_heads, eps = NULL, approximate = "none") {
  n <- length(tokens)
  if (n > nrow(params$wpe)) stop("gpt_forward: ", n, " tokens but only ", nrow(params$wpe), " positions")
  x <- params$wte[tokens, , drop = FALSE] + params$wpe[seq_len(n), , drop = FALSE]
  for (b in seq_len(dim(params$w_q)[1])) {
    x <- decoder_block(x, block_params(params, b), num_heads, eps, approximate)
  }
  layer_norm(x, params$lnf_w, params$lnf_b, eps) %*% params$w_head
}

# F.cross_entropy(logits, targets, ignore_index = ...): the mean over the counted rows.
lm_loss <- function(logits, targets, ignore_index = NULL) {
  keep <- if (is.null(ignore_index)) rep(TRUE, length(targets)) else targets != ignore_index
  rows <- which(keep)
  # a matrix index silently drops a 0 and NA-fills nothing: check the ids before using them
  bad <- targets[rows] < 1 | targets[rows] > ncol(logits)
  if (any(bad)) stop("lm_loss: target ", targets[rows][bad][1], " is not a token id in 1..", ncol(logits))
  lse <- apply(logits[rows, , drop = FALSE], 1, function(r) { m <- max(r); m + log(sum(exp(r - m))) })
  picked <- logits[cbind(rows, targets[rows])]
  mean(lse - picked)                                 # no counted row: mean of nothing is NaN
}
