# Losses in base R: lm_loss, the next-token cross-entropy (the project's own R port).
#
# Layout (ports/CONTRACT.md): logits is n x vocab, a row of next-token logits per position;
# targets holds n token ids, 1-based. A position whose target equals ignore_index (an id in the
# same base: a padding token's, or 0 for "one below the first") is not counted; NULL: every
# position counts. The loss is the mean over the counted positions of
# logsumexp(logits[i, ]) - logits[i, targets[i]], as torch's cross_entropy; with no position
# counted it is 0 / 0 = NaN, as torch's. .check_matrix and .dims come from attention.R.

.check_loss_ids <- function(v, name, len, fn) {
  if (!is.numeric(v) || length(dim(v)) > 1L || length(v) != len || !all(is.finite(v)) ||
      any(v != round(v))) {
    stop(sprintf("%s: %s must be %d integer token id(s); got %s %s",
                 fn, name, len, class(v)[1L], .dims(v)), call. = FALSE)
  }
  invisible(v)
}

lm_loss <- function(logits, targets, ignore_index = NULL) {
  .check_matrix(logits, "logits", "lm_loss")
  n <- nrow(logits)
  vocab <- ncol(logits)
  .check_loss_ids(targets, "targets", n, "lm_loss")
  if (!is.null(ignore_index)) .check_loss_ids(ignore_index, "ignore_index", 1L, "lm_loss")
  counted <- if (is.null(ignore_index)) rep(TRUE, n) else targets != ignore_index
  bad <- which(counted & (targets < 1 | targets > vocab))
  if (length(bad)) {
    stop(sprintf("lm_loss: targets[%d] = %s is neither a token id in 1..%d nor ignore_index (%s)",
                 bad[1L], format(targets[bad[1L]]), vocab, format(ignore_index)), call. = FALSE)
  }
  rows <- which(counted)
  z <- logits[rows, , drop = FALSE]                 # counted positions x vocab
  peak <- apply(z, 1L, max)                         # each position's largest logit
  lse <- peak + log(rowSums(exp(z - peak)))         # stable log-sum-exp (peak recycles down the columns)
  picked <- z[cbind(seq_along(rows), targets[rows])]  # each position's target logit
  sum(lse - picked) / length(rows)                  # no position counted: 0 / 0 = NaN
}
