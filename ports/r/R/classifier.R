# Seed 003's attention classifier in base R: forward, analytic backward, SGD, training loop.
#
# Layout (ports/CONTRACT.md, "Training"): tokens are rows. For one sentence of n words with
# e-dimensional embeddings, d = e + 1 and c classes:
#
#   x       = cbind(x_emb, 0:(n-1))               n x d   (the last column holds the positions)
#   q, k, v = x %*% w_* + b_*                     n x d   (w_* is d x d, b_* length d)
#   weights = softmax(q k^T / sqrt(d))            n x n   (rows sum to 1)
#   z       = weights %*% v                       n x d
#   f       = z %*% w_f + b_f                     n x c   (w_f is d x c, b_f length c)
#   pooled  = colMeans(f); probs = softmax(pooled)        (length c)
#   loss    = -log(probs[label])                  computed as a stable log-softmax
#
# Labels are 1-based class indices (negative 1, neutral 2, positive 3). Parameters travel as one
# named list with the members w_q b_q w_k b_k w_v b_v w_f b_f. Uses softmax(), .dims() and
# .check_matrix() from attention.R (every ports/r/R/*.R is sourced into one environment).
#
# Every check stops with a message that names the argument and prints the sizes involved.

.clf_param_names <- c("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_f", "b_f")

.stopf <- function(fmt, ...) stop(sprintf(fmt, ...), call. = FALSE)

# Checks `params` (names, shapes, finiteness); returns list(d = , c = ).
.clf_check_params <- function(params, fn) {
  if (!is.list(params) || is.null(names(params))) {
    .stopf("%s: params must be a named list with members %s; got %s of length %d",
           fn, paste(.clf_param_names, collapse = " "), class(params)[1L], length(params))
  }
  missing <- setdiff(.clf_param_names, names(params))
  extra <- setdiff(names(params), .clf_param_names)
  if (length(missing) || length(extra) || anyDuplicated(names(params))) {
    .stopf("%s: params must have exactly the members %s; missing %s, unexpected %s",
           fn, paste(.clf_param_names, collapse = " "),
           if (length(missing)) paste(missing, collapse = " ") else "none",
           if (length(extra)) paste(extra, collapse = " ") else "none")
  }
  shapes <- paste(vapply(.clf_param_names, function(p) sprintf("%s %s", p, .dims(params[[p]])), ""),
                  collapse = ", ")
  for (p in .clf_param_names) {
    if (!is.numeric(params[[p]]) || !all(is.finite(params[[p]]))) {
      .stopf("%s: params$%s must be numeric and finite; got %s %s", fn, p,
             class(params[[p]])[1L], .dims(params[[p]]))
    }
  }
  w_q <- params$w_q
  if (!is.matrix(w_q) || nrow(w_q) != ncol(w_q) || nrow(w_q) < 2L) {
    .stopf("%s: params$w_q must be a square d x d matrix with d = e + 1 >= 2; got %s", fn, shapes)
  }
  d <- nrow(w_q)
  w_f <- params$w_f
  if (!is.matrix(w_f) || nrow(w_f) != d || ncol(w_f) < 1L) {
    .stopf("%s: params$w_f must be d x c = %d x c with c >= 1 classes; got %s", fn, d, shapes)
  }
  n_class <- ncol(w_f)
  for (p in c("w_k", "w_v")) {
    if (!is.matrix(params[[p]]) || !identical(dim(params[[p]]), c(d, d))) {
      .stopf("%s: params$%s must be d x d = %d x %d; got %s", fn, p, d, d, shapes)
    }
  }
  for (p in c("b_q", "b_k", "b_v", "b_f")) {
    want <- if (p == "b_f") n_class else d
    b <- params[[p]]
    if (length(dim(b)) > 1L || length(b) != want) {
      .stopf("%s: params$%s must be a vector of length %d (d = %d, c = %d); got %s",
             fn, p, want, d, n_class, shapes)
    }
  }
  list(d = d, c = n_class)
}

.clf_check_x_emb <- function(x_emb, d, fn, name = "x_emb") {
  .check_matrix(x_emb, name, fn)
  if (nrow(x_emb) < 1L || ncol(x_emb) != d - 1L) {
    .stopf(paste0("%s: %s must be n x e with n >= 1 tokens and e = d - 1 = %d features ",
                  "(d = nrow(params$w_q) includes the position column); got %s %s"),
           fn, name, d - 1L, name, .dims(x_emb))
  }
  invisible(x_emb)
}

.is_whole <- function(x) is.numeric(x) && all(is.finite(x)) && all(x == round(x))

.clf_check_label <- function(label, n_class, fn, name = "label") {
  if (length(dim(label)) > 1L || !.is_whole(label) || any(label < 1) || any(label > n_class)) {
    shown <- if (is.numeric(label) && length(label) <= 5L) paste(format(label), collapse = " ")
             else sprintf("%s %s", class(label)[1L], .dims(label))
    .stopf("%s: %s must hold 1-based class indices in 1..%d (negative 1, neutral 2, positive 3); got %s",
           fn, name, n_class, shown)
  }
  as.integer(label)
}

.clf_check_lr <- function(lr, fn) {
  if (!is.numeric(lr) || length(lr) != 1L || !is.finite(lr) || lr < 0) {
    .stopf("%s: lr must be one finite number >= 0; got %s %s", fn, class(lr)[1L],
           if (is.numeric(lr) && length(lr) <= 5L) paste(format(lr), collapse = " ") else .dims(lr))
  }
  as.numeric(lr)
}

.clf_check_frozen <- function(frozen, fn) {
  if (is.null(frozen)) return(character(0))
  if (!is.character(frozen) || anyNA(frozen) || !all(frozen %in% .clf_param_names)) {
    .stopf("%s: frozen must be a character vector of parameter names (%s); got %s",
           fn, paste(.clf_param_names, collapse = " "),
           if (length(frozen)) paste(format(frozen), collapse = " ") else class(frozen)[1L])
  }
  frozen
}

# Adds the bias b to every row of m (b recycles down the columns: element [i, j] gets b[j]).
.add_row <- function(m, b) m + rep(as.vector(b), each = nrow(m))

# The forward pass, unchecked: every stage, named as the contract's result.
.clf_forward <- function(x_emb, p) {
  n <- nrow(x_emb)
  x <- cbind(x_emb, seq_len(n) - 1)
  dimnames(x) <- NULL
  d <- ncol(x)
  q <- .add_row(x %*% p$w_q, p$b_q)
  k <- .add_row(x %*% p$w_k, p$b_k)
  v <- .add_row(x %*% p$w_v, p$b_v)
  weights <- softmax(tcrossprod(q, k) / sqrt(d))
  z <- weights %*% v
  f <- .add_row(z %*% p$w_f, p$b_f)
  pooled <- colMeans(f)
  list(x = x, q = q, k = k, v = v, weights = weights, z = z, f = f,
       pooled = pooled, probs = softmax(pooled))
}

# Stable -log(softmax(pooled)[label]).
.clf_loss <- function(pooled, label) {
  shifted <- pooled - max(pooled)
  log(sum(exp(shifted))) - shifted[[label]]
}

# Exact gradients of the loss for every parameter, from the forward stages `fw`.
.clf_backward <- function(fw, label, p) {
  n <- nrow(fw$x)
  scale <- 1 / sqrt(ncol(fw$x))
  d_pooled <- fw$probs
  d_pooled[label] <- d_pooled[label] - 1 # d loss / d pooled = probs - one_hot(label)
  d_f <- matrix(d_pooled / n, n, length(d_pooled), byrow = TRUE) # the mean gives each row 1/n
  d_z <- tcrossprod(d_f, p$w_f) # n x d
  d_weights <- tcrossprod(d_z, fw$v) # n x n
  d_v <- crossprod(fw$weights, d_z) # n x d
  # one softmax Jacobian per row: dS[i, j] = A[i, j] * (dA[i, j] - sum_l dA[i, l] * A[i, l])
  d_scores <- fw$weights * (d_weights - rowSums(d_weights * fw$weights))
  d_q <- (d_scores %*% fw$k) * scale
  d_k <- crossprod(d_scores, fw$q) * scale
  list(
    w_q = crossprod(fw$x, d_q), b_q = colSums(d_q),
    w_k = crossprod(fw$x, d_k), b_k = colSums(d_k),
    w_v = crossprod(fw$x, d_v), b_v = colSums(d_v),
    w_f = crossprod(fw$z, d_f), b_f = colSums(d_f)
  )
}

# p - lr * grad for every parameter not in `frozen`; names in .clf_param_names order.
.clf_sgd <- function(p, grads, lr, frozen) {
  out <- lapply(.clf_param_names, function(name) {
    if (name %in% frozen) p[[name]] else p[[name]] - lr * grads[[name]]
  })
  names(out) <- .clf_param_names
  out
}

.clf_step <- function(x_emb, label, p, lr, frozen) {
  fw <- .clf_forward(x_emb, p)
  grads <- .clf_backward(fw, label, p)
  list(loss = .clf_loss(fw$pooled, label), probs = fw$probs, grads = grads,
       params = .clf_sgd(p, grads, lr, frozen))
}

classifier_forward <- function(x_emb, params) {
  fn <- "classifier_forward"
  sizes <- .clf_check_params(params, fn)
  .clf_check_x_emb(x_emb, sizes$d, fn)
  .clf_forward(x_emb, params[.clf_param_names])
}

classifier_step <- function(x_emb, label, params, lr, frozen = character(0)) {
  fn <- "classifier_step"
  sizes <- .clf_check_params(params, fn)
  .clf_check_x_emb(x_emb, sizes$d, fn)
  if (length(label) != 1L) .stopf("%s: label must be one class index; got %s", fn, .dims(label))
  label <- .clf_check_label(label, sizes$c, fn)
  .clf_step(x_emb, label, params[.clf_param_names], .clf_check_lr(lr, fn), .clf_check_frozen(frozen, fn))
}

classifier_train <- function(tokens, lengths, labels, params, lr, epochs, frozen = character(0)) {
  fn <- "classifier_train"
  sizes <- .clf_check_params(params, fn)
  lr <- .clf_check_lr(lr, fn)
  frozen <- .clf_check_frozen(frozen, fn)
  if (length(epochs) != 1L || !.is_whole(epochs) || epochs < 0) {
    .stopf("%s: epochs must be one whole number >= 0; got %s", fn, paste(format(epochs), collapse = " "))
  }
  .check_matrix(tokens, "tokens", fn)
  if (ncol(tokens) != sizes$d - 1L) {
    .stopf("%s: tokens must be N x e with e = d - 1 = %d features; got tokens %s, params$w_q %s",
           fn, sizes$d - 1L, .dims(tokens), .dims(params$w_q))
  }
  if (length(dim(lengths)) > 1L || length(dim(labels)) > 1L || length(lengths) == 0L ||
        length(lengths) != length(labels)) {
    .stopf(paste0("%s: lengths and labels must be vectors of the same non-zero length (one per ",
                  "sentence); got lengths %s, labels %s"), fn, .dims(lengths), .dims(labels))
  }
  if (!.is_whole(lengths) || any(lengths < 0) || sum(lengths) != nrow(tokens)) {
    .stopf(paste0("%s: lengths must be whole numbers >= 0 summing to nrow(tokens) = %d; ",
                  "got %d lengths summing to %s"), fn, nrow(tokens), length(lengths), format(sum(lengths)))
  }
  labels <- .clf_check_label(labels, sizes$c, fn, "labels")

  ends <- cumsum(lengths)
  trained <- which(lengths > 0)
  sentences <- lapply(trained, function(i) tokens[(ends[i] - lengths[i] + 1):ends[i], , drop = FALSE])
  if (length(trained) == 0L && epochs > 0) {
    .stopf("%s: the data set has %d sentences but none with at least one token", fn, length(lengths))
  }
  diverged <- function(epoch, i) {
    .stopf(paste0("%s: training diverged (non-finite scores, loss or parameters) in epoch %d at ",
                  "sentence %d (n = %d); lr = %s is too large"),
           fn, epoch, i, as.integer(lengths[[i]]), format(lr))
  }
  p <- params[.clf_param_names]
  epoch_losses <- numeric(epochs)
  for (epoch in seq_len(epochs)) {
    total <- 0
    for (j in seq_along(trained)) {
      i <- trained[[j]]
      step <- tryCatch(.clf_step(sentences[[j]], labels[[i]], p, lr, frozen),
                       error = function(e) diverged(epoch, i)) # inputs were checked: only overflow
      if (!is.finite(step$loss) || !all(vapply(step$params, function(a) all(is.finite(a)), TRUE))) {
        diverged(epoch, i)
      }
      p <- step$params
      total <- total + step$loss # in data set order, then divided by the count
    }
    epoch_losses[epoch] <- total / length(trained)
  }
  list(epoch_losses = epoch_losses, params = p)
}
