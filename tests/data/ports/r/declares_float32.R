# An R port that declares float32 arithmetic: R computes in double only, so the declaration is
# refused when the port loads (attention_ports/runtimes/declaration.py; docs/precision.md), and
# every case is an error naming the field.
attention_ports <- list(operations = c("softmax"), precision = "float32")

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}
