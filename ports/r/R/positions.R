# Position operations in base R: sinusoidal encodings and rotary embeddings (RoPE).
#
# Layout (ports/CONTRACT.md): tokens are rows (n x d). Positions are position values, 0 for the
# first token (not 1-based indices): token p and frequency i = 0 .. d/2 - 1 have the angle
# p * theta_i, theta_i = base^(-2i/d).
#
# This port's rotary embedding pairs feature i with feature i + d/2 (the "halves" pairing of
# GPT-NeoX and Hugging Face's Llama, rotate_half), the contract's default, so it declares nothing;
# a port that pairs 2i with 2i + 1 declares attention_ports <- list(rope_pairing = "interleaved").

.check_even_width <- function(d, what, fn) {
  if (length(d) != 1L || !is.finite(d) || d < 2 || d %% 2 != 0) {
    stop(sprintf("%s: %s must be even and at least 2 (features are rotated in pairs); got %s",
                 fn, what, format(d)), call. = FALSE)
  }
}

.check_base <- function(base, fn) {
  if (!is.numeric(base) || length(base) != 1L || !is.finite(base) || base <= 0) {
    stop(sprintf("%s: base must be one finite positive number; got %s", fn, format(base)), call. = FALSE)
  }
}

# theta_i = base^(-2i/d), i = 0 .. d/2 - 1
.inverse_frequencies <- function(d, base) 1 / base^(seq(0, d - 2, by = 2) / d)

sinusoidal_positions <- function(n, d, base = 10000) {
  fn <- "sinusoidal_positions"
  if (length(n) != 1L || !is.finite(n) || n < 1 || n != round(n)) {
    stop(sprintf("%s: n (the number of positions) must be a positive integer; got %s", fn, format(n)),
         call. = FALSE)
  }
  .check_even_width(d, "d", fn)
  .check_base(base, fn)
  angles <- outer(seq_len(n) - 1, .inverse_frequencies(d, base))  # n x d/2
  pe <- matrix(0, n, d)
  pe[, seq(1, d, by = 2)] <- sin(angles)  # R's columns 1, 3, ... are the features 2i
  pe[, seq(2, d, by = 2)] <- cos(angles)
  pe
}

rotary_embedding <- function(x, positions = NULL, base = 10000) {
  fn <- "rotary_embedding"
  .check_matrix(x, "x", fn)
  n <- nrow(x)
  d <- ncol(x)
  .check_even_width(d, "ncol(x) (the number of features)", fn)
  .check_base(base, fn)
  if (is.null(positions)) {
    positions <- seq_len(n) - 1
  } else if (!is.numeric(positions) || length(positions) != n || !all(is.finite(positions))) {
    stop(sprintf("%s: positions must be %d finite numbers, one per row of x; got %s",
                 fn, n, .dims(positions)), call. = FALSE)
  }
  angles <- outer(as.vector(positions), .inverse_frequencies(d, base))  # n x d/2
  cos_a <- cbind(cos(angles), cos(angles))                               # n x d
  sin_a <- cbind(sin(angles), sin(angles))
  half <- d / 2
  rotate_half <- cbind(-x[, (half + 1):d, drop = FALSE], x[, 1:half, drop = FALSE])
  x * cos_a + rotate_half * sin_a
}
