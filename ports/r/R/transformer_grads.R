# Every parameter's gradient of a GPT's next-token loss in base R (ports/CONTRACT.md, "gpt_grads"):
# the loss of lm_loss(gpt_forward(tokens), targets) and its hand-written backward, as llm.c's
# gpt2_backward. Layout as transformer.R: tokens are rows (n x d), weights d_in x d_out applied as
# x %*% w + b, logits n x vocab, the blocks stacked along a first axis.
#
# The forward below is gpt_forward's wiring again, written out so that it keeps what the backward
# needs: each block's input, its normalised input a, q, k and v, the heads' concatenated output,
# the residual h, the second norm's output m, the feed-forward's pre-activation u and its gelu.
# Each layer norm's backward starts from that norm's input (its mean and inverse standard
# deviation are recomputed there, a d-sum per token); each head's attention weights are recomputed
# from the cached q and k with the causal mask, as FlashAttention's backward does, so a block keeps
# O(n d) numbers instead of the n x n x H weights. Pieces from the port's other files: layer_norm,
# gelu, softmax, scaled_dot_product_attention, .project, .causal_mask, .layer_of, .check_gpt.

# d logits of the mean next-token cross-entropy: (softmax(logits[i, ]) - onehot(targets[i])) / count
# for every counted position i, a zero row for an ignored one (n x vocab).
.lm_loss_backward <- function(logits, targets, ignore_index) {
  counted <- if (is.null(ignore_index)) rep(TRUE, length(targets)) else targets != ignore_index
  d_logits <- softmax(logits)                                 # n x vocab: each row sums to 1
  rows <- which(counted)
  d_logits[cbind(rows, targets[rows])] <- d_logits[cbind(rows, targets[rows])] - 1
  d_logits[!counted, ] <- 0
  d_logits / sum(counted)                                     # the mean: 1 / count each
}

# layer_norm(x, w, b, eps)'s backward for the upstream gradient dy (n x d): list(dx, dw, db). With
# xhat = (x - mu) r, r = 1 / sqrt(var + eps) per row and g = dy * w,
# dx = r (g - mean(g) - xhat mean(g xhat)) (the mean term: mu depends on every feature of its row).
.layer_norm_backward <- function(x, w, eps, dy) {
  centred <- x - rowMeans(x)                                  # n x d (the row means recycle down columns)
  r <- 1 / sqrt(rowMeans(centred^2) + eps)                    # n: inverse standard deviations
  xhat <- centred * r
  g <- sweep(dy, 2L, w, "*")                                  # through the gain
  dx <- r * (g - rowMeans(g) - xhat * rowMeans(g * xhat))
  list(dx = dx, dw = colSums(dy * xhat), db = colSums(dy))
}

# gelu'(u), elementwise, of the form gelu's `approximate` names: the erf form's Phi(u) + u phi(u),
# the tanh form's 0.5 (1 + t) + 0.5 u (1 - t^2) k (1 + 3 c u^2), t = tanh(k (u + c u^3)).
.gelu_derivative <- function(u, approximate) {
  if (identical(approximate, "tanh")) {
    k <- sqrt(2 / pi)
    t <- tanh(k * (u + 0.044715 * u^3))
    return(0.5 * (1 + t) + 0.5 * u * (1 - t^2) * k * (1 + 3 * 0.044715 * u^2))
  }
  pnorm(u) + u * dnorm(u)
}

# The causal multi-head attention's backward from d_att (n x d, the heads' concatenated output's
# gradient) to list(dq, dk, dv), each n x d. Per head, the weights A (queries x keys) are
# recomputed from q and k with the causal mask; then dA = d_out t(v), the softmax's Jacobian per
# query row dS = A * (dA - rowSums(dA * A)), and dq = s dS k, dk = s t(dS) q, dv = t(A) d_out
# (s = 1 / sqrt(d_head)).
.causal_attention_backward <- function(q, k, v, d_att, num_heads) {
  d_head <- ncol(q) %/% num_heads
  s <- 1 / sqrt(d_head)
  causal <- .causal_mask(nrow(q))
  dq <- dk <- dv <- matrix(0, nrow(q), ncol(q))
  for (i in seq_len(num_heads)) {
    cols <- ((i - 1L) * d_head + 1L):(i * d_head)
    qh <- q[, cols, drop = FALSE]
    kh <- k[, cols, drop = FALSE]
    vh <- v[, cols, drop = FALSE]
    d_out <- d_att[, cols, drop = FALSE]
    weights <- scaled_dot_product_attention(qh, kh, vh, mask = causal)$weights  # n x n
    d_weights <- tcrossprod(d_out, vh)                        # (n x d_head) (d_head x n)
    d_scores <- weights * (d_weights - rowSums(d_weights * weights))
    dq[, cols] <- (d_scores %*% kh) * s
    dk[, cols] <- crossprod(d_scores, qh) * s
    dv[, cols] <- crossprod(weights, d_out)
  }
  list(dq = dq, dk = dk, dv = dv)
}

# One block's forward on block b's parameters p, keeping what its backward reads.
.block_forward_cached <- function(x, p, num_heads, eps, approximate, fn) {
  d_head <- ncol(x) %/% num_heads
  a <- layer_norm(x, p$ln1_w, p$ln1_b, eps)                   # n x d
  q <- .project(a, p$w_q, p$b_q, "q", fn)
  k <- .project(a, p$w_k, p$b_k, "k", fn)
  v <- .project(a, p$w_v, p$b_v, "v", fn)
  causal <- .causal_mask(nrow(x))
  att <- do.call(cbind, lapply(seq_len(num_heads), function(i) {
    cols <- ((i - 1L) * d_head + 1L):(i * d_head)
    scaled_dot_product_attention(q[, cols, drop = FALSE], k[, cols, drop = FALSE], v[, cols, drop = FALSE],
                                 mask = causal)$output
  }))                                                         # n x d: the heads in order
  h <- x + .project(att, p$w_o, p$b_o, "o", fn)               # first residual
  m <- layer_norm(h, p$ln2_w, p$ln2_b, eps)
  u <- .project(m, p$w_1, p$b_1, "1", fn)                     # n x d_ff
  act <- gelu(u, approximate = approximate)
  list(y = h + .project(act, p$w_2, p$b_2, "2", fn),          # second residual
       cache = list(x = x, a = a, q = q, k = k, v = v, att = att, h = h, m = m, u = u, act = act))
}

# x %*% w + b's parameter gradients from the output's dy (n x d_out) and the input x (n x d_in).
.linear_grads <- function(dy, x) list(w = crossprod(x, dy), b = colSums(dy))

# One block's backward: from dy (n x d) and the block's cache c to list(dx, grads), grads the
# block's parameter gradients by name.
.block_backward <- function(dy, c, p, num_heads, eps, approximate) {
  g <- list()
  # y = h + gelu(u) w_2 + b_2, u = m w_1 + b_1, m = layer_norm(h)
  lin <- .linear_grads(dy, c$act)
  g$w_2 <- lin$w
  g$b_2 <- lin$b
  du <- tcrossprod(dy, p$w_2) * .gelu_derivative(c$u, approximate)   # n x d_ff
  lin <- .linear_grads(du, c$m)
  g$w_1 <- lin$w
  g$b_1 <- lin$b
  ln <- .layer_norm_backward(c$h, p$ln2_w, eps, tcrossprod(du, p$w_1))
  g$ln2_w <- ln$dw
  g$ln2_b <- ln$db
  dh <- dy + ln$dx                                            # both paths into h
  # h = x + att w_o + b_o, att from q, k, v = a w + b, a = layer_norm(x)
  lin <- .linear_grads(dh, c$att)
  g$w_o <- lin$w
  g$b_o <- lin$b
  back <- .causal_attention_backward(c$q, c$k, c$v, tcrossprod(dh, p$w_o), num_heads)
  for (z in c("q", "k", "v")) {
    lin <- .linear_grads(back[[paste0("d", z)]], c$a)
    g[[paste0("w_", z)]] <- lin$w
    g[[paste0("b_", z)]] <- lin$b
  }
  da <- tcrossprod(back$dq, p$w_q) + tcrossprod(back$dk, p$w_k) + tcrossprod(back$dv, p$w_v)
  ln <- .layer_norm_backward(c$x, p$ln1_w, eps, da)
  g$ln1_w <- ln$dw
  g$ln1_b <- ln$db
  list(dx = dh + ln$dx, grads = g)                            # residual + through the norm
}

gpt_grads <- function(tokens, targets, params, num_heads, ignore_index = NULL, eps = 1e-5,
                      approximate = "none") {
  fn <- "gpt_grads"
  checked <- .check_gpt(tokens, params, num_heads, eps, fn)
  n_layer <- checked$n_layer
  num_heads <- checked$num_heads
  eps <- checked$eps
  n <- length(tokens)

  # forward, keeping each block's cache
  x <- params$wte[tokens, , drop = FALSE] + params$wpe[seq_len(n), , drop = FALSE]  # n x d
  caches <- vector("list", n_layer)
  for (b in seq_len(n_layer)) {
    out <- .block_forward_cached(x, lapply(params[.BLOCK_PARAMS], .layer_of, b), num_heads, eps, approximate, fn)
    x <- out$y
    caches[[b]] <- out$cache
  }
  final <- layer_norm(x, params$lnf_w, params$lnf_b, eps)     # n x d
  logits <- final %*% params$w_head                            # n x vocab
  loss <- lm_loss(logits, targets, ignore_index)               # checks the targets

  # backward
  grads <- lapply(params[.GPT_PARAMS], function(a) if (is.null(dim(a))) numeric(length(a)) else array(0, dim(a)))
  d_logits <- .lm_loss_backward(logits, targets, ignore_index)  # n x vocab
  grads$w_head <- crossprod(final, d_logits)                   # d x vocab
  ln <- .layer_norm_backward(x, params$lnf_w, eps, tcrossprod(d_logits, params$w_head))
  grads$lnf_w <- ln$dw
  grads$lnf_b <- ln$db
  dx <- ln$dx
  for (b in rev(seq_len(n_layer))) {
    back <- .block_backward(dx, caches[[b]], lapply(params[.BLOCK_PARAMS], .layer_of, b), num_heads, eps, approximate)
    for (m in .BLOCK_PARAMS) {
      if (length(dim(grads[[m]])) == 3L) grads[[m]][b, , ] <- back$grads[[m]] else grads[[m]][b, ] <- back$grads[[m]]
    }
    dx <- back$dx
  }
  for (i in seq_len(n)) {                                      # a repeated token accumulates
    grads$wte[tokens[i], ] <- grads$wte[tokens[i], ] + dx[i, ]
  }
  grads$wpe[seq_len(n), ] <- dx                                # positions past n stay zero
  list(loss = loss, grads = grads)
}
