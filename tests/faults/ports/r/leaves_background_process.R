# Fault: softmax starts a background process and returns (correctly). The process must not
# outlive the run: closing the port kills the worker's whole process group, even after the
# worker itself has quit cleanly.

softmax <- function(x) {
  system(sprintf("sleep %s &", Sys.getenv("FAULT_MARKER", "3600")))
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}
