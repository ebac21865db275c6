# Fault: the file itself never finishes loading.

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

repeat {}
