# Fault: every operation hangs: a port can cost at most a few timeouts, then the rest fails at once.
# It waits (a call blocked on something that never comes) rather than spins, so that the timeouts
# it is here for leave the CPU to the tests beside it; escapes_its_group.R spins.

block <- function() repeat Sys.sleep(3600)
softmax <- function(x) block()
scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) block()
self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) block()
