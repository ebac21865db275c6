# Fault: softmax works; scaled_dot_product_attention never returns (it first leaves a flag file,
# when asked to, so that a test knows the call has started). Used to interrupt a run part-way:
# the softmax cases (earlier in the manifest) pass, then the run hangs in attention.

softmax <- function(x) {
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  flag <- Sys.getenv("FAULT_FLAG")
  if (nzchar(flag)) file.create(flag)
  repeat {}
}
