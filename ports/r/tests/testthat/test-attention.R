# Native tests of the R port (ports/r/R/*.R), run by ports/r/run_tests.R, which sources the port
# into the environment these tests run in. Expected values come from seed 000 (the published
# "Self-Attention from Scratch in R" post) and from properties that hold for any correct port.

seed000 <- function() {
  words <- rbind(c(1, 0, 0), c(0, 1, 0), c(1, 1, 0), c(0, 0, 1))
  w_q <- matrix(c(2, 0, 2, 2, 0, 0, 2, 1, 2), 3, 3, byrow = TRUE)
  w_k <- matrix(c(2, 2, 2, 0, 2, 1, 0, 1, 1), 3, 3, byrow = TRUE)
  w_v <- matrix(c(1, 1, 0, 0, 1, 1, 0, 0, 0), 3, 3, byrow = TRUE)
  list(x = words, w_q = w_q, w_k = w_k, w_v = w_v)
}

rmat <- function(n, d, sd = 1) matrix(rnorm(n * d, sd = sd), n, d)

# Straightforward per-row reference, written differently from the port on purpose.
naive_attention <- function(q, k, v, mask = NULL, scale = 1 / sqrt(ncol(q))) {
  n_q <- nrow(q)
  weights <- matrix(0, n_q, nrow(k))
  for (i in seq_len(n_q)) {
    s <- drop(k %*% q[i, ]) * scale
    if (!is.null(mask)) s <- s + mask[i, ]
    if (all(s == -Inf)) next
    e <- exp(s - max(s))
    weights[i, ] <- e / sum(e)
  }
  list(output = weights %*% v, weights = weights)
}

test_that("seed 000: self_attention reproduces the published attention matrix", {
  s <- seed000()
  res <- self_attention(s$x, s$w_q, s$w_k, s$w_v)
  published <- rbind(
    c(0.9852202, 1.741741, 0.7565203),
    c(0.9096526, 1.409653, 0.5000000),
    c(0.9985123, 1.758493, 0.7599811),
    c(0.9956039, 1.904073, 0.9084692)
  )
  expect_equal(signif(res$output, 7), published, tolerance = 0)
  expect_equal(res$q, s$x %*% s$w_q)
  expect_equal(res$weights %*% res$v, res$output)
  expect_named(res, c("q", "k", "v", "weights", "output"))
})

test_that("softmax normalises rows, is shift invariant and stable for large logits", {
  set.seed(1)
  x <- rmat(5, 7)
  y <- softmax(x)
  expect_equal(dim(y), c(5L, 7L))
  expect_equal(rowSums(y), rep(1, 5))
  expect_equal(softmax(x + 1000), y)
  big <- rbind(c(1000, 1001, 999), c(-1000, 0, 1000))
  yb <- softmax(big)
  expect_true(all(is.finite(yb)))
  expect_equal(yb[1, ], exp(c(-1, 0, -2)) / sum(exp(c(-1, 0, -2))))
  expect_equal(yb[2, 3], 1)
})

test_that("softmax: an all -Inf row is NaN, a partly -Inf row gets zeros there", {
  x <- rbind(c(-Inf, -Inf, -Inf), c(0, -Inf, 0))
  y <- softmax(x)
  expect_true(all(is.nan(y[1, ])))
  expect_equal(y[2, ], c(0.5, 0, 0.5))
})

test_that("softmax rejects NaN and +Inf", {
  expect_error(softmax(matrix(c(1, NaN), 1)), "NaN or \\+Inf")
  expect_error(softmax(matrix(c(1, Inf), 1)), "1 x 2")
})

test_that("scaled_dot_product_attention matches a naive loop (n_q != n_k, d_k != d_v)", {
  set.seed(2)
  q <- rmat(3, 4)
  k <- rmat(6, 4)
  v <- rmat(6, 5)
  res <- scaled_dot_product_attention(q, k, v)
  expect_equal(res, naive_attention(q, k, v))
  expect_equal(dim(res$output), c(3L, 5L))
  expect_equal(dim(res$weights), c(3L, 6L))
  expect_equal(scaled_dot_product_attention(q, k, v, scale = 1), naive_attention(q, k, v, scale = 1))
})

test_that("masks: additive, logical, and a fully masked query row gives zeros", {
  set.seed(3)
  q <- rmat(3, 4)
  k <- rmat(5, 4)
  v <- rmat(5, 2)
  keep <- matrix(TRUE, 3, 5)
  keep[1, 4:5] <- FALSE
  keep[2, ] <- FALSE
  additive <- ifelse(keep, 0, -Inf)
  additive[3, 1] <- -2.5 # a finite bias
  res <- scaled_dot_product_attention(q, k, v, mask = additive)
  expect_equal(res, naive_attention(q, k, v, mask = additive))
  expect_equal(res$weights[2, ], rep(0, 5))
  expect_equal(res$output[2, ], rep(0, 2))
  expect_equal(res$weights[1, 4:5], c(0, 0))
  expect_equal(sum(res$weights[1, ]), 1)
  expect_equal(scaled_dot_product_attention(q, k, v, mask = keep),
               scaled_dot_product_attention(q, k, v, mask = ifelse(keep, 0, -Inf)))
})

test_that("large logits (scores ~ 1e3) stay finite", {
  set.seed(4)
  q <- rmat(4, 3, sd = 30)
  k <- rmat(4, 3, sd = 30)
  v <- rmat(4, 3)
  res <- scaled_dot_product_attention(q, k, v, scale = 1)
  expect_gt(max(abs(tcrossprod(q, k))), 500)
  expect_true(all(is.finite(res$weights)))
  expect_equal(rowSums(res$weights), rep(1, 4))
  expect_equal(res, naive_attention(q, k, v, scale = 1))
})

test_that("self_attention: biases, d_k != d_v, masks", {
  set.seed(5)
  x <- rmat(4, 6)
  w_q <- rmat(6, 3)
  w_k <- rmat(6, 3)
  w_v <- rmat(6, 2)
  b_q <- rnorm(3)
  b_k <- rnorm(3)
  b_v <- rnorm(2)
  mask <- ifelse(lower.tri(diag(4), diag = TRUE), 0, -Inf)
  res <- self_attention(x, w_q, w_k, w_v, b_q = b_q, b_k = b_k, b_v = b_v, mask = mask, scale = 0.5)
  q <- sweep(x %*% w_q, 2, b_q, "+")
  k <- sweep(x %*% w_k, 2, b_k, "+")
  v <- sweep(x %*% w_v, 2, b_v, "+")
  expect_equal(res$q, q)
  expect_equal(res$v, v)
  expect_equal(res[c("output", "weights")], naive_attention(q, k, v, mask = mask, scale = 0.5))
  expect_equal(res$weights[1, ], c(1, 0, 0, 0))
})

test_that("multi_head_attention: heads are contiguous column blocks, weights are h x n_q x n_k", {
  set.seed(6)
  d <- 8
  h <- 4
  d_head <- d / h
  query <- rmat(3, d)
  key <- rmat(5, d)
  value <- rmat(5, d)
  w <- replicate(4, rmat(d, d), simplify = FALSE)
  b <- replicate(4, rnorm(d), simplify = FALSE)
  mask <- matrix(0, 3, 5)
  mask[2, ] <- -Inf
  res <- multi_head_attention(query, key, value, w[[1]], w[[2]], w[[3]], w[[4]], h,
                              b_q = b[[1]], b_k = b[[2]], b_v = b[[3]], b_o = b[[4]], mask = mask)
  expect_equal(dim(res$weights), c(h, 3L, 5L))
  expect_equal(dim(res$output), c(3L, d))
  q <- sweep(query %*% w[[1]], 2, b[[1]], "+")
  k <- sweep(key %*% w[[2]], 2, b[[2]], "+")
  v <- sweep(value %*% w[[3]], 2, b[[3]], "+")
  heads <- lapply(seq_len(h), function(i) {
    cols <- ((i - 1) * d_head + 1):(i * d_head)
    naive_attention(q[, cols], k[, cols], v[, cols], mask = mask)
  })
  for (i in seq_len(h)) expect_equal(res$weights[i, , ], heads[[i]]$weights)
  concat <- do.call(cbind, lapply(heads, `[[`, "output"))
  expect_equal(res$output, sweep(concat %*% w[[4]], 2, b[[4]], "+"))
  expect_equal(res$weights[, 2, ], matrix(0, h, 5))
})

test_that("multi_head_attention with one head and identity projections is plain attention", {
  set.seed(7)
  x <- rmat(4, 3)
  y <- rmat(6, 3)
  res <- multi_head_attention(x, y, y, diag(3), diag(3), diag(3), diag(3), 1L)
  plain <- scaled_dot_product_attention(x, y, y)
  expect_equal(res$output, plain$output)
  expect_equal(res$weights[1, , ], plain$weights)
})

test_that("argument errors name the argument and print the sizes", {
  expect_error(scaled_dot_product_attention(diag(3), diag(4), diag(4)), "q 3 x 3, k 4 x 4")
  expect_error(scaled_dot_product_attention(diag(3), diag(3), diag(2)), "n_k")
  expect_error(scaled_dot_product_attention(diag(3), diag(3), diag(3), mask = diag(2)), "3 x 3 matrix; got 2 x 2")
  expect_error(scaled_dot_product_attention(1:3, diag(3), diag(3)), "numeric matrix")
  expect_error(self_attention(diag(3), diag(4), diag(3), diag(3)), "w_q .*4 x 4")
  expect_error(self_attention(diag(3), diag(3), diag(3), diag(3), b_q = 1:2), "length 3")
  expect_error(multi_head_attention(diag(4), diag(4), diag(4), diag(4), diag(4), diag(4), diag(4), 3),
               "num_heads = 3 .* d_model = 4")
  expect_error(multi_head_attention(diag(4), diag(4), diag(4), diag(4), diag(3), diag(4), diag(4), 2),
               "w_k must be d_model x d_model = 4 x 4; got 3 x 3")
})
