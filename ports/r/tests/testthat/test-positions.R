# Native tests of ports/r/R/positions.R: expected values from per-element loops written from the
# definitions (Vaswani et al.; RoFormer's rotation of pairs), not from the vectorised port.

naive_rope_halves <- function(x, positions, base = 10000) {
  d <- ncol(x)
  half <- d / 2
  out <- x
  for (t in seq_len(nrow(x))) {
    for (i in 0:(half - 1)) {
      angle <- positions[t] * base^(-2 * i / d)
      a <- x[t, i + 1]
      b <- x[t, i + 1 + half]
      out[t, i + 1] <- a * cos(angle) - b * sin(angle)
      out[t, i + 1 + half] <- b * cos(angle) + a * sin(angle)
    }
  }
  out
}

test_that("sinusoidal_positions: sin in odd columns, cos in even ones, row 1 is position 0", {
  pe <- sinusoidal_positions(3, 4, base = 100)
  expect_equal(dim(pe), c(3L, 4L))
  expect_equal(pe[1, ], c(0, 1, 0, 1))
  expect_equal(pe[3, ], c(sin(2), cos(2), sin(2 / 10), cos(2 / 10)), tolerance = 1e-15)
})

test_that("rotary_embedding pairs feature i with i + d/2 at positions 0 .. n-1", {
  set.seed(1)
  x <- matrix(rnorm(5 * 6), 5, 6)
  expect_equal(rotary_embedding(x), naive_rope_halves(x, 0:4), tolerance = 1e-14)
  expect_equal(rotary_embedding(x)[1, ], x[1, ])  # position 0 is no rotation
})

test_that("rotary_embedding takes explicit positions and a base; rotations keep each pair's norm", {
  set.seed(2)
  x <- matrix(rnorm(3 * 4), 3, 4)
  pos <- c(4095, 7, 1200)
  y <- rotary_embedding(x, positions = pos, base = 500000)
  expect_equal(y, naive_rope_halves(x, pos, 500000), tolerance = 1e-13)
  expect_equal(y[, 1]^2 + y[, 3]^2, x[, 1]^2 + x[, 3]^2, tolerance = 1e-14)
})

test_that("bad input stops with a message naming the argument", {
  expect_error(rotary_embedding(matrix(1, 2, 3)), "ncol\\(x\\).*even")
  expect_error(rotary_embedding(matrix(1, 2, 2), positions = 1:3), "positions must be 2")
  expect_error(sinusoidal_positions(0, 4), "n \\(the number of positions\\)")
  expect_error(sinusoidal_positions(2, 4, base = -1), "base must be")
})
