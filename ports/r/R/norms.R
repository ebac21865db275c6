# Normalisation layers in base R: layer_norm and rms_norm (the project's own R port).
#
# Layout (ports/CONTRACT.md): tokens are rows (n x d); each row is normalised over its d features.
# weight (gain) and bias are plain vectors of length d, or NULL. eps is added inside the square
# root; the variance is the biased one (divided by d), as torch.nn.functional.layer_norm.
# .check_matrix and .dims come from attention.R (the port's files share one environment).

.check_norm_vector <- function(v, name, d, x, fn) {
  if (is.null(v)) return(invisible(NULL))
  if (!is.numeric(v) || !is.null(dim(v)) && length(dim(v)) > 1L || length(v) != d) {
    stop(sprintf("%s: %s must be a numeric vector of length d = %d (x is %s); got %s",
                 fn, name, d, .dims(x), .dims(v)), call. = FALSE)
  }
  if (!all(is.finite(v))) stop(sprintf("%s: %s must be finite", fn, name), call. = FALSE)
  invisible(v)
}

.check_eps <- function(eps, fn) {
  if (!is.numeric(eps) || length(eps) != 1L || !is.finite(eps) || eps < 0) {
    stop(sprintf("%s: eps must be one finite number >= 0; got %s", fn, format(eps)), call. = FALSE)
  }
  invisible(eps)
}

layer_norm <- function(x, weight = NULL, bias = NULL, eps = 1e-5) {
  .check_matrix(x, "x", "layer_norm")
  d <- ncol(x)
  .check_norm_vector(weight, "weight", d, x, "layer_norm")
  .check_norm_vector(bias, "bias", d, x, "layer_norm")
  .check_eps(eps, "layer_norm")
  mu <- rowMeans(x)                          # n: each token's mean over its features
  centred <- x - mu                          # n x d (mu recycles down the columns: row i - mu[i])
  variance <- rowMeans(centred * centred)    # n: biased, two passes (no cancellation)
  y <- centred / sqrt(variance + eps)        # n x d
  if (!is.null(weight)) y <- sweep(y, 2L, weight, `*`)  # layer_norm gain
  if (!is.null(bias)) y <- sweep(y, 2L, bias, `+`)      # layer_norm shift
  y
}

rms_norm <- function(x, weight = NULL, eps = 1e-5) {
  .check_matrix(x, "x", "rms_norm")
  d <- ncol(x)
  .check_norm_vector(weight, "weight", d, x, "rms_norm")
  .check_eps(eps, "rms_norm")
  mean_square <- rowMeans(x * x)             # n: no centring
  y <- x / sqrt(mean_square + eps)           # n x d
  if (!is.null(weight)) y <- sweep(y, 2L, weight, `*`)  # rms_norm gain
  y
}
