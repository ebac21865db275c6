# Activation functions in base R: gelu (the project's own R port).
#
# Layout (ports/CONTRACT.md): tokens are rows (n x d); the function applies to every element.
# approximate = "none" (the default) is x * Phi(x), Phi the standard normal distribution function
# (pnorm: the same number as 0.5 x (1 + erf(x / sqrt(2))), which base R has no erf for);
# approximate = "tanh" is GPT-2's 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).

gelu <- function(x, approximate = "none") {
  .check_matrix(x, "x", "gelu")
  if (is.null(approximate)) approximate <- "none"
  if (!is.character(approximate) || length(approximate) != 1L || !approximate %in% c("none", "tanh")) {
    stop(sprintf("gelu: approximate must be \"none\" or \"tanh\"; got %s", format(approximate)), call. = FALSE)
  }
  if (approximate == "tanh") {
    inner <- sqrt(2 / pi) * (x + 0.044715 * x^3)   # n x d
    return(0.5 * x * (1 + tanh(inner)))
  }
  x * pnorm(x)                                     # the erf form
}
