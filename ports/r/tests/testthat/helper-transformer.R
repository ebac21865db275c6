# Random parameters for the transformer's native tests (test-transformer.R, test-transformer_grads.R;
# testthat sources helper-*.R before the test files).

random_block <- function(d, d_ff) {
  p <- list(ln1_w = 1 + rnorm(d, sd = 0.1), ln1_b = rnorm(d, sd = 0.1),
            ln2_w = 1 + rnorm(d, sd = 0.1), ln2_b = rnorm(d, sd = 0.1),
            w_1 = matrix(rnorm(d * d_ff), d, d_ff) / sqrt(d), b_1 = rnorm(d_ff, sd = 0.1),
            w_2 = matrix(rnorm(d_ff * d), d_ff, d) / sqrt(d_ff), b_2 = rnorm(d, sd = 0.1))
  for (m in c("q", "k", "v", "o")) {
    p[[paste0("w_", m)]] <- matrix(rnorm(d * d), d, d) / sqrt(d)
    p[[paste0("b_", m)]] <- rnorm(d, sd = 0.1)
  }
  p
}

# gpt_forward's parameters: n_layer blocks stacked block first (w_q[b, , ]), as the adapter sends them.
random_gpt <- function(n_layer, d, d_ff, vocab, n_ctx) {
  blocks <- lapply(seq_len(n_layer), function(b) random_block(d, d_ff))
  stacked <- lapply(stats::setNames(nm = names(blocks[[1L]])), function(m) {
    first <- blocks[[1L]][[m]]
    if (is.matrix(first)) {
      aperm(array(unlist(lapply(blocks, `[[`, m)), c(dim(first), n_layer)), c(3L, 1L, 2L))
    } else {
      matrix(unlist(lapply(blocks, `[[`, m)), n_layer, length(first), byrow = TRUE)
    }
  })
  c(list(wte = matrix(rnorm(vocab * d), vocab, d), wpe = matrix(rnorm(n_ctx * d, sd = 0.1), n_ctx, d)),
    stacked,
    list(lnf_w = 1 + rnorm(d, sd = 0.1), lnf_b = rnorm(d, sd = 0.1), w_head = matrix(rnorm(d * vocab), d, vocab)))
}
