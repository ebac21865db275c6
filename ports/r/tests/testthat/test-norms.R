# Native tests of ports/r/R/norms.R: per-row loops written independently of the vectorised port,
# and the properties the contract names (eps inside the square root, the biased variance, two passes).

naive_layer_norm <- function(x, weight, bias, eps) {
  y <- x
  for (i in seq_len(nrow(x))) {
    r <- x[i, ]
    m <- sum(r) / length(r)
    v <- sum((r - m)^2) / length(r)
    y[i, ] <- (r - m) / sqrt(v + eps) * weight + bias
  }
  y
}

test_that("layer_norm matches a per-row loop, with and without the affine part", {
  set.seed(18)
  x <- matrix(rnorm(15, sd = 3), 3, 5)
  w <- rnorm(5)
  b <- rnorm(5)
  expect_equal(layer_norm(x, w, b, eps = 1e-3), naive_layer_norm(x, w, b, 1e-3), tolerance = 1e-13)
  expect_equal(layer_norm(x), naive_layer_norm(x, rep(1, 5), rep(0, 5), 1e-5), tolerance = 1e-13)
})

test_that("layer_norm: a constant row is 0 (eps keeps it finite) and a row of one feature gives the bias", {
  expect_equal(layer_norm(rbind(c(2, 2, 2), c(-1, -1, -1))), matrix(0, 2, 3))
  expect_equal(layer_norm(matrix(c(4, -2, 7), 3, 1), bias = 0.5), matrix(0.5, 3, 1))
})

test_that("layer_norm keeps its digits on a nearly constant row with a large mean", {
  x <- rbind(1e6 + c(-1, 0, 1, 2) * 1e-2)
  expected <- (c(-1, 0, 1, 2) - 0.5) / sqrt(mean((c(-1, 0, 1, 2) - 0.5)^2))
  expect_equal(drop(layer_norm(x, eps = 0)), expected, tolerance = 1e-7)
})

test_that("rms_norm is x / sqrt(mean(x^2) + eps) * weight, not centred", {
  x <- rbind(c(1, 2, 3, 4), c(10, 10, 10, 10))
  w <- c(1, 2, 3, 4)
  expect_equal(rms_norm(x, w, eps = 0)[2, ], w)
  expect_equal(rms_norm(x, eps = 1e-5)[1, ], c(1, 2, 3, 4) / sqrt(7.5 + 1e-5))
})

test_that("the norms name the argument and its size when it does not fit", {
  expect_error(layer_norm(matrix(1, 2, 3), weight = c(1, 2)), "weight must be a numeric vector of length d = 3")
  expect_error(rms_norm(matrix(1, 2, 3), eps = -1), "eps must be one finite number >= 0")
})
