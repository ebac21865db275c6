# Native tests of seed 003's attention classifier (ports/r/R/classifier.R), run by
# ports/r/run_tests.R in the environment the port was sourced into. Expected values come from
# properties any correct implementation has: central finite differences of the loss, the
# softmax's invariances, and a plain per-step re-run of the training loop.

clf_params <- function(e, n_class = 3, sd = 0.3) {
  d <- e + 1
  list(
    w_q = matrix(rnorm(d * d, sd = sd), d, d), b_q = rnorm(d, sd = 0.2),
    w_k = matrix(rnorm(d * d, sd = sd), d, d), b_k = rnorm(d, sd = 0.2),
    w_v = matrix(rnorm(d * d, sd = sd), d, d), b_v = rnorm(d, sd = 0.2),
    w_f = matrix(rnorm(d * n_class, sd = sd), d, n_class), b_f = rnorm(n_class, sd = 0.2)
  )
}

clf_names <- c("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_f", "b_f")

clf_loss <- function(x_emb, label, params) classifier_step(x_emb, label, params, lr = 0)$loss

# Central finite differences of the loss, one parameter element at a time.
fd_grads <- function(x_emb, label, params, h = 1e-5) {
  lapply(setNames(clf_names, clf_names), function(name) {
    g <- params[[name]]
    for (i in seq_along(g)) {
      up <- params
      down <- params
      up[[name]][i] <- up[[name]][i] + h
      down[[name]][i] <- down[[name]][i] - h
      g[i] <- (clf_loss(x_emb, label, up) - clf_loss(x_emb, label, down)) / (2 * h)
    }
    g
  })
}

expect_grads_match_fd <- function(x_emb, label, params) {
  got <- classifier_step(x_emb, label, params, lr = 0.1)$grads
  want <- fd_grads(x_emb, label, params)
  expect_named(got, clf_names)
  for (name in clf_names) {
    expect_equal(dim(got[[name]]), dim(params[[name]]), info = name)
    expect_equal(length(got[[name]]), length(params[[name]]), info = name)
    scale <- max(abs(want[[name]]), 1e-3)
    expect_lt(max(abs(got[[name]] - want[[name]])) / scale, 1e-6, label = sprintf("FD error of %s", name))
  }
}

test_that("classifier_forward: positions, shapes, and each stage as plain attention", {
  set.seed(11)
  x_emb <- matrix(rnorm(5 * 4), 5, 4)
  p <- clf_params(4)
  fw <- classifier_forward(x_emb, p)
  expect_named(fw, c("x", "q", "k", "v", "weights", "z", "f", "pooled", "probs"))
  expect_equal(fw$x, cbind(x_emb, 0:4), ignore_attr = TRUE)
  expect_identical(fw$x[, 5], c(0, 1, 2, 3, 4))
  for (m in c("q", "k", "v", "z")) expect_equal(dim(fw[[m]]), c(5L, 5L), info = m)
  expect_equal(dim(fw$weights), c(5L, 5L))
  expect_equal(dim(fw$f), c(5L, 3L))
  expect_null(dim(fw$pooled))
  expect_null(dim(fw$probs))
  expect_equal(rowSums(fw$weights), rep(1, 5))
  expect_equal(sum(fw$probs), 1)
  # the scale is 1/sqrt(d) with d = e + 1, not 1/sqrt(d * n)
  att <- self_attention(fw$x, p$w_q, p$w_k, p$w_v, b_q = p$b_q, b_k = p$b_k, b_v = p$b_v)
  expect_equal(fw[c("q", "k", "v", "weights")], att[c("q", "k", "v", "weights")])
  expect_equal(fw$z, att$output)
  f <- sweep(att$output %*% p$w_f, 2, p$b_f, "+")
  expect_equal(fw$f, f)
  expect_equal(fw$pooled, colMeans(f))
  expect_equal(fw$probs, exp(fw$pooled) / sum(exp(fw$pooled)))
})

test_that("classifier_step: loss is -log probs[label] with 1-based labels", {
  set.seed(12)
  x_emb <- matrix(rnorm(4 * 3), 4, 3)
  p <- clf_params(3)
  probs <- classifier_forward(x_emb, p)$probs
  for (label in 1:3) {
    res <- classifier_step(x_emb, label, p, lr = 0.1)
    expect_equal(res$loss, -log(probs[label]))
    expect_equal(res$probs, probs)
  }
  expect_named(classifier_step(x_emb, 2L, p, 0.1), c("loss", "probs", "grads", "params"))
  expect_error(classifier_step(x_emb, 0, p, 0.1), "1-based class indices in 1..3 .*got 0")
  expect_error(classifier_step(x_emb, 4L, p, 0.1), "in 1..3 .*got 4")
  expect_error(classifier_step(x_emb, 1.5, p, 0.1), "got 1.5")
})

test_that("the loss is a stable log-softmax: huge logits give a finite loss", {
  set.seed(13)
  x_emb <- matrix(rnorm(3 * 2), 3, 2)
  p <- clf_params(2)
  p$w_f[] <- 0
  p$b_f <- c(1000, 0, -1000) # pooled = b_f exactly
  expect_equal(classifier_step(x_emb, 3L, p, 0.1)$loss, 2000)
  expect_equal(classifier_step(x_emb, 1L, p, 0.1)$loss, 0)
  res <- classifier_step(x_emb, 2L, p, 0.1)
  expect_equal(res$loss, 1000)
  expect_true(all(vapply(res$grads, function(g) all(is.finite(g)), TRUE)))
})

test_that("gradients match central finite differences (n = 5, e = 3)", {
  set.seed(14)
  expect_grads_match_fd(matrix(rnorm(5 * 3), 5, 3), 2L, clf_params(3))
})

test_that("gradients match finite differences with 4 classes, n = 2 and large positions", {
  set.seed(15)
  expect_grads_match_fd(matrix(rnorm(2 * 2), 2, 2), 4L, clf_params(2, n_class = 4))
  # 12 tokens: positions up to 11 give large scores; d = 3 (e = 2)
  expect_grads_match_fd(matrix(rnorm(12 * 2), 12, 2), 1L, clf_params(2, sd = 0.2))
})

test_that("n = 1: the attention gradients are exactly zero and the rest match FD", {
  set.seed(16)
  x_emb <- matrix(rnorm(4), 1, 4)
  p <- clf_params(4)
  res <- classifier_step(x_emb, 3L, p, lr = 0.1)
  expect_equal(classifier_forward(x_emb, p)$weights, matrix(1, 1, 1))
  for (name in c("w_q", "b_q", "w_k", "b_k")) expect_true(all(res$grads[[name]] == 0), info = name)
  expect_gt(max(abs(res$grads$w_v)), 0)
  expect_grads_match_fd(x_emb, 3L, p)
})

test_that("SGD: p - lr * grad; frozen parameters come back unchanged, gradients still returned", {
  set.seed(17)
  x_emb <- matrix(rnorm(6 * 3), 6, 3)
  p <- clf_params(3)
  lr <- 0.25
  res <- classifier_step(x_emb, 1L, p, lr)
  for (name in clf_names) expect_equal(res$params[[name]], p[[name]] - lr * res$grads[[name]], info = name)
  frozen <- c("w_f", "b_f", "w_q")
  fz <- classifier_step(x_emb, 1L, p, lr, frozen = frozen)
  expect_named(fz$params, clf_names)
  for (name in frozen) {
    expect_identical(fz$params[[name]], p[[name]], info = name)
    expect_identical(fz$grads[[name]], res$grads[[name]], info = name)
    expect_gt(max(abs(fz$grads[[name]])), 0)
  }
  for (name in setdiff(clf_names, frozen)) {
    expect_identical(fz$params[[name]], res$params[[name]], info = name)
  }
  expect_identical(classifier_step(x_emb, 1L, p, lr, frozen = character(0)), res)
  expect_identical(classifier_step(x_emb, 1L, p, 0)$params, p)
  expect_error(classifier_step(x_emb, 1L, p, lr, frozen = "W_f"), "frozen .*W_f")
})

test_that("params may come in any order; wrong shapes and names stop with the sizes", {
  set.seed(18)
  x_emb <- matrix(rnorm(3 * 3), 3, 3)
  p <- clf_params(3)
  expect_identical(classifier_step(x_emb, 2L, rev(p), 0.1), classifier_step(x_emb, 2L, p, 0.1))
  expect_error(classifier_forward(matrix(0, 3, 4), p), "e = d - 1 = 3 .*got x_emb 3 x 4")
  expect_error(classifier_forward(matrix(0, 0, 3), p), "n >= 1 .*got x_emb 0 x 3")
  bad <- p
  bad$w_k <- matrix(0, 4, 3)
  expect_error(classifier_forward(x_emb, bad), "w_k must be d x d = 4 x 4; got .*w_k 4 x 3")
  bad <- p
  bad$b_f <- 1:4
  expect_error(classifier_forward(x_emb, bad), "b_f must be a vector of length 3 .*b_f a vector of length 4")
  expect_error(classifier_forward(x_emb, p[-2]), "missing b_q")
  expect_error(classifier_forward(x_emb, c(p, extra = 1)), "unexpected extra")
  expect_error(classifier_step(x_emb, 1L, p, -1), "lr must be one finite number >= 0")
})

# A tiny data set: 6 sentences of e = 2 features, one of them empty.
tiny_data <- function() {
  set.seed(19)
  lengths <- c(3L, 2L, 0L, 4L, 1L, 3L)
  labels <- c(1L, 3L, 2L, 2L, 3L, 1L)
  centres <- rbind(c(-1, 0.5), c(0, -1), c(1, 0.5)) # one centre per class
  rows <- rep(seq_along(lengths), lengths)
  tokens <- centres[labels[rows], , drop = FALSE] + matrix(rnorm(sum(lengths) * 2, sd = 0.3), ncol = 2)
  list(tokens = tokens, lengths = lengths, labels = labels)
}

test_that("classifier_train: one step per non-empty sentence, positions restart per sentence", {
  data <- tiny_data()
  set.seed(20)
  p <- clf_params(2)
  res <- classifier_train(data$tokens, data$lengths, data$labels, p, lr = 0.1, epochs = 3L)
  expect_named(res, c("epoch_losses", "params"))
  expect_named(res$params, clf_names)
  # the same loop by hand: each sentence sliced from tokens, the empty one skipped
  ends <- cumsum(data$lengths)
  q <- p
  losses <- numeric(3)
  for (epoch in 1:3) {
    step_losses <- c()
    for (i in which(data$lengths > 0)) {
      rows <- (ends[i] - data$lengths[i] + 1):ends[i]
      step <- classifier_step(data$tokens[rows, , drop = FALSE], data$labels[i], q, 0.1)
      q <- step$params
      step_losses <- c(step_losses, step$loss)
    }
    losses[epoch] <- mean(step_losses) # 5 trained sentences: the empty one is not counted
  }
  expect_equal(res$epoch_losses, losses, tolerance = 1e-14)
  expect_equal(res$params, q, tolerance = 1e-14)
})

test_that("classifier_train: empty sentences change nothing; epochs = 0 returns the parameters", {
  data <- tiny_data()
  set.seed(21)
  p <- clf_params(2)
  keep <- data$lengths > 0
  with_empty <- classifier_train(data$tokens, data$lengths, data$labels, p, 0.1, 2L)
  without <- classifier_train(data$tokens, data$lengths[keep], data$labels[keep], p, 0.1, 2L)
  expect_identical(with_empty, without)
  none <- classifier_train(data$tokens, data$lengths, data$labels, p, 0.1, 0L)
  expect_identical(none$epoch_losses, numeric(0))
  expect_identical(none$params, p)
  expect_error(classifier_train(data$tokens[0, , drop = FALSE], 0L, 1L, p, 0.1, 1L),
               "1 sentences but none with at least one token")
})

test_that("classifier_train: the loss falls on a separable tiny data set; frozen stays put", {
  data <- tiny_data()
  set.seed(22)
  p <- clf_params(2, sd = 0.1)
  res <- classifier_train(data$tokens, data$lengths, data$labels, p, lr = 0.5, epochs = 30L)
  expect_length(res$epoch_losses, 30L)
  expect_true(all(is.finite(res$epoch_losses)))
  expect_lt(res$epoch_losses[30], 0.5 * res$epoch_losses[1])
  expect_gt(mean(diff(res$epoch_losses) < 0), 0.8) # almost every epoch improves
  fz <- classifier_train(data$tokens, data$lengths, data$labels, p, lr = 0.5, epochs = 5L,
                         frozen = c("w_f", "b_f"))
  expect_identical(fz$params$w_f, p$w_f)
  expect_identical(fz$params$b_f, p$b_f)
  expect_false(isTRUE(all.equal(fz$params$w_v, p$w_v)))
})

test_that("classifier_train: argument errors print sizes; divergence names the epoch", {
  data <- tiny_data()
  set.seed(23)
  p <- clf_params(2)
  expect_error(classifier_train(data$tokens, data$lengths[-1], data$labels, p, 0.1, 1L),
               "got lengths a vector of length 5, labels a vector of length 6")
  expect_error(classifier_train(data$tokens, data$lengths + 1L, data$labels, p, 0.1, 1L),
               "summing to nrow\\(tokens\\) = 13; got 6 lengths summing to 19")
  expect_error(classifier_train(cbind(data$tokens, 0), data$lengths, data$labels, p, 0.1, 1L),
               "e = d - 1 = 2 features; got tokens 13 x 3")
  expect_error(classifier_train(data$tokens, data$lengths, data$labels - 1L, p, 0.1, 1L),
               "labels must hold 1-based class indices")
  expect_error(classifier_train(data$tokens, data$lengths, data$labels, p, 0.1, -1),
               "epochs must be one whole number >= 0")
  expect_error(classifier_train(data$tokens, data$lengths, data$labels, p, 1e300, 2L),
               "training diverged .*epoch 1 at sentence 2 .*lr = 1e\\+300")
})
