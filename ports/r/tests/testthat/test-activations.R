# Native tests of ports/r/R/activations.R: gelu's two forms against values computed independently.

test_that("gelu's erf form is x * Phi(x): 0 at 0, x/2 near 0, x far out, ~0 far below", {
  x <- rbind(c(0, 1e-9, 1, -1), c(10, -10, 40, -40))
  y <- gelu(x)
  expect_equal(y[1, ], c(0, 5e-10, 0.8413447460685429, -0.15865525393145707), tolerance = 1e-14)
  expect_equal(y[2, 1], 10)
  expect_true(abs(y[2, 2]) < 1e-20)
})

test_that("gelu's tanh form is GPT-2's approximation, within 1e-3 of the erf form", {
  x <- matrix(seq(-4, 4, by = 0.5), 1)
  a <- sqrt(2 / pi) * (x + 0.044715 * x^3)
  expect_equal(gelu(x, approximate = "tanh"), 0.5 * x * (1 + tanh(a)), tolerance = 1e-15)
  expect_true(max(abs(gelu(x, "tanh") - gelu(x))) < 1e-3)
  expect_true(max(abs(gelu(x, "tanh") - gelu(x))) > 1e-5)  # but they are not the same function
})

test_that("gelu names a bad approximate", {
  expect_error(gelu(matrix(1, 1, 1), approximate = "erf"), "approximate must be \"none\" or \"tanh\"")
})
