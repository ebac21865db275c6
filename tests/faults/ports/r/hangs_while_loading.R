# Fault: the file itself never finishes loading (it waits, leaving the CPU to the tests beside it).

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

repeat Sys.sleep(3600)
