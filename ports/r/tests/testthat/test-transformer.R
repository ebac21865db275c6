# Native tests of ports/r/R/transformer.R: shapes, causality, a one-token block worked by hand, and
# the block and the model against their pieces (layer_norm, multi_head_attention, feed_forward).

block_of <- function(params, b) {
  lapply(params[names(random_block(1, 1))], function(s) {
    if (length(dim(s)) == 3L) matrix(s[b, , ], dim(s)[2L], dim(s)[3L]) else s[b, ]
  })
}

causal <- function(n) ifelse(upper.tri(matrix(0, n, n)), -Inf, 0)

test_that("the three operations return n x d and n x vocab, one row per position", {
  set.seed(18)
  p <- random_block(8, 12)
  x <- matrix(rnorm(5 * 8), 5, 8)
  expect_equal(dim(feed_forward(x, p$w_1, p$b_1, p$w_2, p$b_2)), c(5L, 8L))
  expect_equal(dim(decoder_block(x, p, 2)), c(5L, 8L))
  g <- random_gpt(2, 8, 12, vocab = 7, n_ctx = 6)
  expect_equal(dim(gpt_forward(c(3, 1, 7, 7, 2), g, 2)), c(5L, 7L))
})

test_that("a one-token block is x + (ln1(x) w_v + b_v) w_o + b_o + ffn(ln2(h)), worked by hand", {
  # One token attends only to itself with weight exactly 1: the attention output is its value row.
  set.seed(5)
  p <- random_block(4, 6)
  x <- matrix(c(0.5, -1, 2, 0.25), 1, 4)
  ln <- function(z, w, b, eps) (z - mean(z)) / sqrt(mean((z - mean(z))^2) + eps) * w + b
  gelu_tanh <- function(z) 0.5 * z * (1 + tanh(sqrt(2 / pi) * (z + 0.044715 * z^3)))
  a <- ln(x, p$ln1_w, p$ln1_b, 1e-3)
  h <- x + ((a %*% p$w_v + p$b_v) %*% p$w_o + p$b_o)
  y <- h + gelu_tanh(ln(h, p$ln2_w, p$ln2_b, 1e-3) %*% p$w_1 + p$b_1) %*% p$w_2 + p$b_2
  expect_equal(decoder_block(x, p, 2, eps = 1e-3, approximate = "tanh"), y, tolerance = 1e-13)
})

test_that("decoder_block is its pieces: layer_norm, causal multi_head_attention, feed_forward", {
  set.seed(7)
  p <- random_block(12, 20)
  x <- matrix(rnorm(6 * 12), 6, 12)
  attn <- multi_head_attention(layer_norm(x, p$ln1_w, p$ln1_b), layer_norm(x, p$ln1_w, p$ln1_b),
                               layer_norm(x, p$ln1_w, p$ln1_b), p$w_q, p$w_k, p$w_v, p$w_o, 3,
                               p$b_q, p$b_k, p$b_v, p$b_o, mask = causal(6))$output
  h <- x + attn
  y <- h + feed_forward(layer_norm(h, p$ln2_w, p$ln2_b), p$w_1, p$b_1, p$w_2, p$b_2)
  # the same operations in another order of calls: equal to the last bits but for BLAS's choices
  expect_equal(decoder_block(x, p, 3), y, tolerance = 1e-14)
})

test_that("gpt_forward is the embeddings, the blocks in order, the final norm and the head", {
  set.seed(11)
  g <- random_gpt(3, 8, 16, vocab = 9, n_ctx = 7)
  tokens <- c(9L, 1L, 4L, 4L)
  x <- g$wte[tokens, ] + g$wpe[1:4, ]
  for (b in 1:3) x <- decoder_block(x, block_of(g, b), 4, eps = 1e-4, approximate = "tanh")
  expected <- layer_norm(x, g$lnf_w, g$lnf_b, 1e-4) %*% g$w_head
  expect_equal(gpt_forward(tokens, g, 4, eps = 1e-4, approximate = "tanh"), expected, tolerance = 1e-14)
})

test_that("causality: changing a later token leaves the earlier positions' rows unchanged", {
  set.seed(3)
  g <- random_gpt(2, 8, 12, vocab = 6, n_ctx = 5)
  a <- gpt_forward(c(1, 2, 3, 4, 5), g, 2)
  b <- gpt_forward(c(1, 2, 3, 6, 1), g, 2)
  # exactly: the later keys' weights are exp(-Inf) = 0, and no value of a row depends on a later row
  expect_identical(a[1:3, ], b[1:3, ])
  expect_false(isTRUE(all.equal(a[4, ], b[4, ])))
  x <- matrix(rnorm(4 * 8), 4, 8)
  y <- decoder_block(x, block_of(g, 1), 2)
  x[4, ] <- x[4, ] + 1
  expect_identical(decoder_block(x, block_of(g, 1), 2)[1:3, ], y[1:3, ])
})

test_that("the transformer names the argument and the sizes when they do not fit", {
  set.seed(1)
  p <- random_block(8, 12)
  x <- matrix(rnorm(16), 2, 8)
  expect_error(decoder_block(x, p[names(p) != "w_q"], 2), "decoder_block: params lacks w_q")
  p$w_o <- p$w_o[, 1:4]
  expect_error(decoder_block(x, p, 2), "params\\$w_o must be 8 x 8 \\(d = ncol\\(x\\) = 8, d_ff = 12\\); got 8 x 4")
  expect_error(decoder_block(x, random_block(8, 12), 3), "num_heads = 3 must be a positive divisor of d_model = 8")
  g <- random_gpt(2, 8, 12, vocab = 5, n_ctx = 3)
  expect_error(gpt_forward(c(1, 6), g, 2), "1-based token ids in 1..5")
  expect_error(gpt_forward(c(1, 2, 3, 4), g, 2), "4 tokens, but wpe has positions for n_ctx = 3")
  g$ln2_b <- g$ln2_b[, 1:7]
  expect_error(gpt_forward(1, g, 2), "params\\$ln2_b must be 2 x 8")
})
