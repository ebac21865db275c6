# Native tests of ports/r/R/optim.R: a per-element loop written independently of the vectorised
# port, Adam's known first step, and the properties the contract names (decoupled decay, bias
# correction, plain Adam at weight_decay = 0).

naive_adamw <- function(p, g, m, v, t, lr, b1, b2, eps, wd) {
  out <- list(param = p, m = m, v = v)
  for (i in seq_along(p)) {
    mi <- b1 * m[i] + (1 - b1) * g[i]
    vi <- b2 * v[i] + (1 - b2) * g[i] * g[i]
    out$m[i] <- mi
    out$v[i] <- vi
    out$param[i] <- p[i] - lr * wd * p[i] - lr * (mi / (1 - b1^t)) / (sqrt(vi / (1 - b2^t)) + eps)
  }
  out
}

test_that("adamw_step matches a per-element loop, on a matrix and on a vector", {
  set.seed(18)
  p <- matrix(rnorm(12), 3, 4)
  g <- matrix(rnorm(12), 3, 4)
  m <- matrix(rnorm(12, sd = 0.1), 3, 4)
  v <- matrix(runif(12, 0, 0.01), 3, 4)
  got <- adamw_step(p, g, m, v, 7, lr = 0.01, beta1 = 0.8, weight_decay = 0.1)
  want <- naive_adamw(p, g, m, v, 7, 0.01, 0.8, 0.999, 1e-8, 0.1)
  expect_equal(dim(got$param), c(3L, 4L))
  for (name in c("param", "m", "v")) expect_equal(got[[name]], want[[name]], tolerance = 1e-13)
  vec <- adamw_step(p[1, ], g[1, ], m[1, ], v[1, ], 1000)
  expect_equal(vec$param, naive_adamw(p[1, ], g[1, ], m[1, ], v[1, ], 1000, 1e-3, 0.9, 0.999, 1e-8, 0.01)$param,
               tolerance = 1e-13)
})

test_that("the first step from zero moments moves each entry by about lr * sign(grad) (bias correction)", {
  g <- c(3, -2e-3, 5e-6)
  got <- adamw_step(c(0, 0, 0), g, c(0, 0, 0), c(0, 0, 0), 1, lr = 0.1, weight_decay = 0)
  expect_equal(got$param, -0.1 * g / (abs(g) + 1e-8), tolerance = 1e-12)
  expect_equal(got$m, 0.1 * g)
  expect_equal(got$v, (1 - 0.999) * g^2)
})

test_that("weight decay is decoupled: a zero gradient only shrinks the parameter", {
  got <- adamw_step(c(2, -4), c(0, 0), c(0, 0), c(0, 0), 3, lr = 0.5, weight_decay = 0.1)
  expect_equal(got$param, c(2, -4) * (1 - 0.05))
})

test_that("adamw_step names the argument that does not fit", {
  expect_error(adamw_step(matrix(1, 2, 2), matrix(1, 2, 3), matrix(0, 2, 2), matrix(0, 2, 2), 1), "one shape")
  expect_error(adamw_step(1, 1, 0, 0, 0), "step must be one integer >= 1")
  expect_error(adamw_step(1, 1, 0, -1, 1), "v \\(the second moment")
  expect_error(adamw_step(1, 1, 0, 0, 1, beta2 = 1), "below 1")
})
