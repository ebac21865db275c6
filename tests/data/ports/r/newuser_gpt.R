# A new user's GPT-2 port in base R, with its backward written by hand (issue 26's trial "as a new
# user would"). Written from ports/CONTRACT.md and the public description of llm.c's
# train_gpt2.c (karpathy/llm.c), NOT from our ports: as there, each layer has a forward that keeps
# what its backward needs (layer norm's mean-centred x times rstd, the attention's probabilities,
# the gelu's input) and a backward that accumulates into the gradients, in llm.c's order
# (encoder, layernorm, matmul, attention, gelu, residual, crossentropy). Unlike llm.c, the weights
# are R's d_in x d_out (x %*% W) and q, k, v are three projections, as the contract has them.
# tests/judge/test_newuser_trial.py plants four mistakes in it (NEWUSER_MISTAKES there).
attention_ports <- list(
  operations = c("layer_norm", "gelu", "feed_forward", "decoder_block", "gpt_forward", "lm_loss", "gpt_grads")
)

BLOCK_MATS <- c("w_q", "w_k", "w_v", "w_o", "w_1", "w_2")
BLOCK_VECS <- c("ln1_w", "ln1_b", "b_q", "b_k", "b_v", "b_o", "ln2_w", "ln2_b", "b_1", "b_2")

# ---------------------------------------------------------------- layers: forward and backward

# llm.c's encoder_forward: token row plus position row.
encoder_forward <- function(tokens, wte, wpe) {
  wte[tokens, , drop = FALSE] + wpe[seq_along(tokens), , drop = FALSE]
}

# llm.c's encoder_backward: each position's gradient added to its token's row and its position's row
# (a token seen twice gets both).
encoder_backward <- function(dout, tokens, wte, wpe) {
  dwte <- matrix(0, nrow(wte), ncol(wte))
  dwpe <- matrix(0, nrow(wpe), ncol(wpe))
  for (t in seq_along(tokens)) {
    dwte[tokens[t], ] <- dwte[tokens[t], ] + dout[t, ]
    dwpe[t, ] <- dwpe[t, ] + dout[t, ]
  }
  list(wte = dwte, wpe = dwpe)
}

# llm.c's layernorm_forward over each row; the variance without bias correction.
layernorm_forward <- function(x, weight, bias, eps) {
  mu <- rowMeans(x)
  xshift <- x - mu                       # a length-n vector recycles down the columns: row-wise
  v <- rowMeans(xshift * xshift)
  rstd <- 1 / sqrt(v + eps)
  xhat <- xshift * rstd
  out <- xhat
  if (!is.null(weight)) out <- out * rep(weight, each = nrow(x))
  if (!is.null(bias)) out <- out + rep(bias, each = nrow(x))
  list(out = out, xhat = xhat, rstd = rstd)
}

# llm.c's layernorm_backward: the two reductions, then the three terms of dx.
layernorm_backward <- function(dout, cache, weight) {
  dnorm <- dout * rep(weight, each = nrow(dout))
  dnorm_mean <- rowMeans(dnorm)
  dnorm_norm_mean <- rowMeans(dnorm * cache$xhat)
  dx <- (dnorm - dnorm_mean - cache$xhat * dnorm_norm_mean) * cache$rstd
  list(dx = dx, dweight = colSums(cache$xhat * dout), dbias = colSums(dout))
}

matmul_forward <- function(x, w, b) {
  out <- x %*% w
  if (!is.null(b)) out <- out + rep(b, each = nrow(x))
  out
}

matmul_backward <- function(dout, x, w) {
  list(dx = dout %*% t(w), dw = t(x) %*% dout, db = colSums(dout))
}

# llm.c's attention_forward: per head, scores of query t against keys 1..t, scaled by 1/sqrt(hs),
# a stable softmax, the weighted values.
attention_forward <- function(q, k, v, nh) {
  n <- nrow(q)
  C <- ncol(q)
  if (C %% nh != 0) stop("attention: num_heads = ", nh, " does not divide C = ", C)
  hs <- C %/% nh
  scale <- 1 / sqrt(hs)
  out <- matrix(0, n, C)
  att <- vector("list", nh)
  for (h in seq_len(nh)) {
    cols <- (h - 1) * hs + seq_len(hs)
    preatt <- (q[, cols, drop = FALSE] %*% t(k[, cols, drop = FALSE])) * scale
    preatt[col(preatt) > row(preatt)] <- -Inf
    e <- exp(preatt - apply(preatt, 1, max))
    a <- e / rowSums(e)
    att[[h]] <- a
    out[, cols] <- a %*% v[, cols, drop = FALSE]
  }
  list(out = out, att = att)
}

# llm.c's attention_backward: through the value sum, the softmax, then the query-key product.
attention_backward <- function(dout, q, k, v, att, nh) {
  C <- ncol(q)
  hs <- C %/% nh
  scale <- 1 / sqrt(hs)
  dq <- matrix(0, nrow(q), C)
  dk <- matrix(0, nrow(k), C)
  dv <- matrix(0, nrow(v), C)
  for (h in seq_len(nh)) {
    cols <- (h - 1) * hs + seq_len(hs)
    a <- att[[h]]
    datt <- dout[, cols, drop = FALSE] %*% t(v[, cols, drop = FALSE])
    dv[, cols] <- t(a) %*% dout[, cols, drop = FALSE]
    dpreatt <- a * (datt - rowSums(a * datt))        # softmax's local derivative, row by row
    dq[, cols] <- (dpreatt %*% k[, cols, drop = FALSE]) * scale
    dk[, cols] <- (t(dpreatt) %*% q[, cols, drop = FALSE]) * scale
  }
  list(dq = dq, dk = dk, dv = dv)
}

GELU_SCALING_FACTOR <- sqrt(2 / pi)

gelu_forward <- function(x, approximate) {
  if (approximate == "tanh") {
    0.5 * x * (1 + tanh(GELU_SCALING_FACTOR * (x + 0.044715 * x^3)))
  } else {
    x * pnorm(x)
  }
}

gelu_backward <- function(x, dout, approximate) {
  if (approximate == "tanh") {
    arg <- GELU_SCALING_FACTOR * (x + 0.044715 * x^3)
    th <- tanh(arg)
    sech2 <- 1 - th * th
    local <- 0.5 * (1 + th) + x * 0.5 * sech2 * GELU_SCALING_FACTOR * (1 + 3 * 0.044715 * x * x)
  } else {
    local <- pnorm(x) + x * dnorm(x)
  }
  local * dout
}

# ---------------------------------------------------------------- the block and the model

.opt_eps <- function(eps) if (is.null(eps)) 1e-5 else eps
.opt_approx <- function(approximate) if (is.null(approximate)) "none" else approximate

block_forward <- function(x, p, nh, eps, approximate) {
  cache <- list(x = x)
  cache$ln1 <- layernorm_forward(x, p$ln1_w, p$ln1_b, eps)
  cache$q <- matmul_forward(cache$ln1$out, p$w_q, p$b_q)
  cache$k <- matmul_forward(cache$ln1$out, p$w_k, p$b_k)
  cache$v <- matmul_forward(cache$ln1$out, p$w_v, p$b_v)
  cache$attn <- attention_forward(cache$q, cache$k, cache$v, nh)
  attproj <- matmul_forward(cache$attn$out, p$w_o, p$b_o)
  cache$h <- x + attproj                                   # residual 1
  cache$ln2 <- layernorm_forward(cache$h, p$ln2_w, p$ln2_b, eps)
  cache$fch <- matmul_forward(cache$ln2$out, p$w_1, p$b_1)
  cache$fch_gelu <- gelu_forward(cache$fch, approximate)
  fcproj <- matmul_forward(cache$fch_gelu, p$w_2, p$b_2)
  cache$y <- cache$h + fcproj                                  # residual 2
  cache
}

block_backward <- function(dy, cache, p, nh, approximate) {
  g <- list()
  dh <- dy                                             # residual 2 passes dy straight to h
  mm <- matmul_backward(dy, cache$fch_gelu, p$w_2)
  g$w_2 <- mm$dw
  g$b_2 <- mm$db
  dfch <- gelu_backward(cache$fch, mm$dx, approximate)
  mm <- matmul_backward(dfch, cache$ln2$out, p$w_1)
  g$w_1 <- mm$dw
  g$b_1 <- mm$db
  ln <- layernorm_backward(mm$dx, cache$ln2, p$ln2_w)
  g$ln2_w <- ln$dweight
  g$ln2_b <- ln$dbias
  dh <- dh + ln$dx
  mm <- matmul_backward(dh, cache$attn$out, p$w_o)
  g$w_o <- mm$dw
  g$b_o <- mm$db
  da <- attention_backward(mm$dx, cache$q, cache$k, cache$v, cache$attn$att, nh)
  dln1 <- 0
  for (s in c("q", "k", "v")) {
    mm <- matmul_backward(da[[paste0("d", s)]], cache$ln1$out, p[[paste0("w_", s)]])
    g[[paste0("w_", s)]] <- mm$dw
    g[[paste0("b_", s)]] <- mm$db
    dln1 <- dln1 + mm$dx
  }
  ln <- layernorm_backward(dln1, cache$ln1, p$ln1_w)
  g$ln1_w <- ln$dweight
  g$ln1_b <- ln$dbias
  list(dx = dh + ln$dx, grads = g)
}

# Block b's parameters from the stacks (block axis first).
block_params <- function(params, b) {
  p <- list()
  for (s in BLOCK_MATS) p[[s]] <- matrix(params[[s]][b, , ], dim(params[[s]])[2], dim(params[[s]])[3])
  for (s in BLOCK_VECS) p[[s]] <- params[[s]][b, ]
  p
}

model_forward <- function(tokens, params, nh, eps, approximate) {
  n <- length(tokens)
  if (n > nrow(params$wpe)) stop("gpt: ", n, " tokens but only ", nrow(params$wpe), " positions")
  x <- encoder_forward(tokens, params$wte, params$wpe)
  caches <- list()
  for (b in seq_len(dim(params$w_q)[1])) {
    caches[[b]] <- block_forward(x, block_params(params, b), nh, eps, approximate)
    x <- caches[[b]]$y
  }
  lnf <- layernorm_forward(x, params$lnf_w, params$lnf_b, eps)
  list(logits = lnf$out %*% params$w_head, lnf = lnf, x = x, blocks = caches)
}

# Which positions the loss counts, and a clear error for a target that is not a token id.
counted <- function(targets, vocab, ignore_index) {
  keep <- if (is.null(ignore_index)) rep(TRUE, length(targets)) else targets != ignore_index
  bad <- keep & (targets < 1 | targets > vocab)
  if (any(bad)) stop("lm_loss: target ", targets[bad][1], " is not a token id in 1..", vocab)
  keep
}

# llm.c's crossentropy_forward, as a mean over the counted positions (log-sum-exp, stable).
lm_loss <- function(logits, targets, ignore_index = NULL) {
  keep <- counted(targets, ncol(logits), ignore_index)
  m <- apply(logits, 1, max)
  lse <- m + log(rowSums(exp(logits - m)))
  rows <- which(keep)
  sum(lse[rows] - logits[cbind(rows, targets[rows])]) / length(rows)
}

# ---------------------------------------------------------------- the contract's functions

layer_norm <- function(x, weight = NULL, bias = NULL, eps = NULL) {
  layernorm_forward(x, weight, bias, .opt_eps(eps))$out
}

gelu <- function(x, approximate = "none") gelu_forward(x, .opt_approx(approximate))

feed_forward <- function(x, w_1, b_1, w_2, b_2, approximate = "none") {
  matmul_forward(gelu_forward(matmul_forward(x, w_1, b_1), .opt_approx(approximate)), w_2, b_2)
}

decoder_block <- function(x, params, num_heads, eps = NULL, approximate = "none") {
  block_forward(x, params, num_heads, .opt_eps(eps), .opt_approx(approximate))$y
}

gpt_forward <- function(tokens, params, num_heads, eps = NULL, approximate = "none") {
  model_forward(tokens, params, num_heads, .opt_eps(eps), .opt_approx(approximate))$logits
}

gpt_grads <- function(tokens, targets, params, num_heads, ignore_index = NULL, eps = NULL, approximate = "none") {
  eps <- .opt_eps(eps)
  approximate <- .opt_approx(approximate)
  f <- model_forward(tokens, params, num_heads, eps, approximate)
  logits <- f$logits
  loss <- lm_loss(logits, targets, ignore_index)
  # crossentropy_softmax_backward: (probs - onehot) / count on the counted positions, 0 elsewhere
  keep <- counted(targets, ncol(logits), ignore_index)
  probs <- exp(logits - apply(logits, 1, max))
  probs <- probs / rowSums(probs)
  dlogits <- matrix(0, nrow(logits), ncol(logits))
  rows <- which(keep)
  dlogits[rows, ] <- probs[rows, , drop = FALSE]
  dlogits[cbind(rows, targets[rows])] <- dlogits[cbind(rows, targets[rows])] - 1
  dlogits <- dlogits / length(rows)
  grads <- list(w_head = t(f$lnf$out) %*% dlogits)
  ln <- layernorm_backward(dlogits %*% t(params$w_head), f$lnf, params$lnf_w)
  grads$lnf_w <- ln$dweight
  grads$lnf_b <- ln$dbias
  dx <- ln$dx
  L <- dim(params$w_q)[1]
  for (s in BLOCK_MATS) grads[[s]] <- array(0, dim(params[[s]]))
  for (s in BLOCK_VECS) grads[[s]] <- array(0, dim(params[[s]]))
  for (b in rev(seq_len(L))) {
    bb <- block_backward(dx, f$blocks[[b]], block_params(params, b), num_heads, approximate)
    for (s in BLOCK_MATS) grads[[s]][b, , ] <- bb$grads[[s]]
    for (s in BLOCK_VECS) grads[[s]][b, ] <- bb$grads[[s]]
    dx <- bb$dx
  }
  enc <- encoder_backward(dx, tokens, params$wte, params$wpe)
  grads$wte <- enc$wte
  grads$wpe <- enc$wpe
  list(loss = loss, grads = grads[names(params)])
}
