# Native tests of ports/r/R/transformer_train.R: two steps against Adam written out element by
# element (the first step's m_hat / sqrt(v_hat) is g / |g|; the second's carries the first's
# moments and corrects by 1 - beta^2), each loss the one before its step, the shapes, bad steps.

set.seed(1803)
gt_params <- random_gpt(1, 4, 6, vocab = 5, n_ctx = 4)
gt_tokens <- c(2, 4, 2)
gt_targets <- c(4, 2, 5)

test_that("gpt_train's two steps are gpt_grads then AdamW with the moments carried", {
  lr <- 0.01
  wd <- 0.1
  r <- gpt_train(gt_tokens, gt_targets, gt_params, 2, 2, lr = lr, weight_decay = wd)
  expect_named(r, c("losses", "params"))
  first <- gpt_grads(gt_tokens, gt_targets, gt_params, 2)
  p1 <- gt_params
  for (m in names(p1)) {
    g <- first$grads[[m]]
    p1[[m]] <- gt_params[[m]] * (1 - lr * wd) - lr * g / (abs(g) + 1e-8)   # m_hat = g, v_hat = g^2
  }
  second <- gpt_grads(gt_tokens, gt_targets, p1, 2)
  expect_equal(r$losses, c(first$loss, second$loss), tolerance = 1e-12)
  # grads$b_k is exactly 0 (the softmax ignores the key bias) and computed as rounding noise, which
  # Adam divides by eps: b_k moves by lr times noise / 1e-8 from run to run, nothing else does
  expect_lt(max(abs(r$params$b_k - gt_params$b_k * (1 - lr * wd)^2)), 1e-6)
  for (m in setdiff(names(p1), "b_k")) {
    g1 <- first$grads[[m]]
    g2 <- second$grads[[m]]
    m_hat <- (0.9 * 0.1 * g1 + 0.1 * g2) / (1 - 0.9^2)
    v_hat <- (0.999 * 0.001 * g1^2 + 0.001 * g2^2) / (1 - 0.999^2)
    want <- p1[[m]] * (1 - lr * wd) - lr * m_hat / (sqrt(v_hat) + 1e-8)
    expect_equal(r$params[[m]], want, tolerance = 1e-12, info = m)
  }
})

test_that("gpt_train refuses a number of steps that is not a whole number >= 1", {
  expect_error(gpt_train(gt_tokens, gt_targets, gt_params, 2, 0), "steps must be one integer >= 1")
  expect_error(gpt_train(gt_tokens, gt_targets, gt_params, 2, 1.5), "steps must be one integer >= 1")
})
