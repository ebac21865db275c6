# Does not parse: the adapter must say so and name this file.

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max)
  e / rowSums(e)
}
