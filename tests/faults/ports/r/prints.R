# Fault: a port that prints while it works, in every way R can: the console (cat, print), a child
# process (system), a direct write to file descriptor 1, and stderr (message). None of it may reach
# a reply or our stdout; all of it is captured and shown with the case that printed it.

.shout <- function(where) {
  cat(sprintf("cat to the console from %s\n", where))
  print(sprintf("print from %s", where))
  system(sprintf("echo 'a child process (system) from %s'", where))
  fd1 <- file("/dev/stdout", "w", raw = TRUE)  # R's own C-level writes to descriptor 1
  cat(sprintf("straight to fd 1 from %s\n", where), file = fd1)
  close(fd1)
  message(sprintf("message to stderr from %s", where))
}

softmax <- function(x) {
  .shout("softmax")
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

# Prints, then fails: the error carries what this call printed.
scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  .shout("attention")
  stop("attention is not ready yet")
}
