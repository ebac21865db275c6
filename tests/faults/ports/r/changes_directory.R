# Fault: softmax moves R's working directory (setwd) and returns (correctly). Our own relative
# paths (a --json report) must not move with it.

softmax <- function(x) {
  setwd(tempdir())
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}
