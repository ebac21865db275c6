# Native tests of ports/r/R/transformer_grads.R: the gradient against central finite differences of
# the port's own lm_loss(gpt_forward(...)) on a tiny model, every option once, the shapes, the
# embedding rows of absent tokens and unused positions. A few hundred tiny forwards: seconds.

# d loss / d params[[name]][i] by central differences of the port's forward and loss
finite_difference <- function(tokens, targets, params, heads, name, i, ignore_index = NULL, h = 1e-6, ...) {
  loss_at <- function(delta) {
    params[[name]][i] <- params[[name]][i] + delta
    lm_loss(gpt_forward(tokens, params, heads, ...), targets, ignore_index)
  }
  (loss_at(h) - loss_at(-h)) / (2 * h)
}

set.seed(1802)
gg_params <- random_gpt(2, 4, 6, vocab = 6, n_ctx = 6)
gg_tokens <- c(2, 5, 2, 3)  # token 2 twice; 1, 4 and 6 absent; n = 4 < n_ctx
gg_targets <- c(5, 2, 3, 1)

test_that("gpt_grads returns the forward's loss and a gradient shaped as every parameter", {
  r <- gpt_grads(gg_tokens, gg_targets, gg_params, 2)
  expect_named(r, c("loss", "grads"))
  expect_identical(r$loss, lm_loss(gpt_forward(gg_tokens, gg_params, 2), gg_targets))  # the same forward
  expect_named(r$grads, .GPT_PARAMS)
  for (m in .GPT_PARAMS) {
    expect_identical(if (is.null(dim(r$grads[[m]]))) length(r$grads[[m]]) else dim(r$grads[[m]]),
                     if (is.null(dim(gg_params[[m]]))) length(gg_params[[m]]) else dim(gg_params[[m]]), info = m)
  }
  expect_true(all(r$grads$wte[c(1, 4, 6), ] == 0))  # tokens that never occur
  expect_true(all(r$grads$wte[c(2, 3, 5), ] != 0))
  expect_true(all(r$grads$wpe[5:6, ] == 0))         # positions past n
})

for (case in list(list(label = "erf gelu", opts = list()),
                  list(label = "tanh gelu, eps 1e-3, one position ignored",
                       opts = list(eps = 1e-3, approximate = "tanh", ignore_index = 1)))) {
  test_that(paste("every element of every gradient matches central differences:", case$label), {
    grads <- do.call(gpt_grads, c(list(gg_tokens, gg_targets, gg_params, 2), case$opts))$grads
    worst <- 0
    for (m in .GPT_PARAMS) {
      for (i in seq_along(gg_params[[m]])) {
        fd <- do.call(finite_difference, c(list(gg_tokens, gg_targets, gg_params, 2, m, i), case$opts))
        worst <- max(worst, abs(grads[[m]][i] - fd) / (1e-3 + abs(fd)))
      }
    }
    expect_lt(worst, 1e-6)  # central differences of h = 1e-6: ~1e-9 here
  })
}

test_that("a repeated token's wte row is the sum of its positions' input gradients", {
  g <- gpt_grads(gg_tokens, gg_targets, gg_params, 2)$grads
  expect_equal(g$wte[2, ], g$wpe[1, ] + g$wpe[3, ], tolerance = 1e-12)
  expect_false(isTRUE(all.equal(g$wte[2, ], g$wpe[1, ])))
  fd <- vapply(1:4, function(f) finite_difference(gg_tokens, gg_targets, gg_params, 2, "wte", cbind(2, f)), 0)
  expect_equal(g$wte[2, ], fd, tolerance = 1e-6)
})

test_that("gpt_grads' errors name it and the input at fault", {
  expect_error(gpt_grads(c(1, 9), c(1, 2), gg_params, 2), "gpt_grads: tokens")
  expect_error(gpt_grads(gg_tokens, gg_targets, gg_params, 3), "gpt_grads: num_heads")
  expect_error(gpt_grads(gg_tokens, c(1, 2), gg_params, 2), "targets")
})
