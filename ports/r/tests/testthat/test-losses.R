# Native tests of ports/r/R/losses.R: lm_loss against values computed independently.

naive_loss <- function(logits, targets, ignore = NULL) {
  total <- 0
  count <- 0
  for (i in seq_len(nrow(logits))) {
    if (!is.null(ignore) && targets[i] == ignore) next
    z <- logits[i, ]
    total <- total + log(sum(exp(z - max(z)))) + max(z) - z[targets[i]]
    count <- count + 1
  }
  total / count
}

test_that("lm_loss is the mean cross-entropy of the targets, 1-based", {
  set.seed(3)
  logits <- matrix(rnorm(5 * 7), 5, 7)
  targets <- c(1, 7, 3, 3, 5)
  expect_equal(lm_loss(logits, targets), naive_loss(logits, targets), tolerance = 1e-14)
  # uniform logits: every position's loss is log(vocab)
  expect_equal(lm_loss(matrix(0, 3, 7), c(2, 4, 6)), log(7), tolerance = 1e-15)
  # one position: -log softmax(z)[y] written out
  z <- c(1, 2, 3)
  expect_equal(lm_loss(matrix(z, 1), 2), -log(exp(2) / sum(exp(z))), tolerance = 1e-15)
})

test_that("positions whose target is ignore_index are not counted, in the mean's denominator either", {
  logits <- rbind(c(0, 1, 2), c(2, 0, 1), c(5, 5, 5))
  expect_equal(lm_loss(logits, c(3, 1, 1), ignore_index = 1), naive_loss(logits[1, , drop = FALSE], 3))
  expect_equal(lm_loss(logits, c(3, 0, 0), ignore_index = 0), naive_loss(logits[1, , drop = FALSE], 3))
  expect_true(is.nan(lm_loss(logits, c(0, 0, 0), ignore_index = 0)))  # nothing counted: 0 / 0
})

test_that("lm_loss is stable for logits of +-1000 and a target whose probability underflows", {
  logits <- rbind(c(1000, 999, 998), c(-1000, -1001, -1002))
  # lse = 1000 + log(...) rounds at 1000: ~1e-13 absolute, whatever the loss's own size
  expect_lt(abs(lm_loss(logits, c(1, 1)) - log(1 + exp(-1) + exp(-2))), 1e-12)
  expect_equal(lm_loss(matrix(c(0, -800), 1), 2), 800, tolerance = 1e-15)
})

test_that("lm_loss names a target that is not a token id", {
  expect_error(lm_loss(matrix(0, 2, 3), c(1, 4)), "targets\\[2\\] = 4 is neither a token id in 1..3")
  expect_error(lm_loss(matrix(0, 2, 3), c(1, 0)), "targets\\[2\\] = 0")
  expect_error(lm_loss(matrix(0, 2, 3), c(1, 2, 3)), "targets must be 2 integer token id")
  expect_error(lm_loss(matrix(0, 2, 3), c(1, 2), ignore_index = 1.5), "ignore_index must be 1 integer")
})
