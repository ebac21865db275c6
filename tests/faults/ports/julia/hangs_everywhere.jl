# Fault: every operation hangs: a port can cost at most a few timeouts, then the rest fails at once.
# It waits (a call blocked on something that never comes) rather than spins, so that the timeouts
# it is here for leave the CPU to the tests beside it; loop_softmax.jl (tests/data/ports) spins.
block() = while true sleep(3600) end
softmax(x) = block()
scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing) = block()
self_attention(x, w_q, w_k, w_v; b_q = nothing, b_k = nothing, b_v = nothing, mask = nothing, scale = nothing) = block()
