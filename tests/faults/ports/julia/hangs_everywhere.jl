# Fault: every operation hangs: a port can cost at most a few timeouts, then the rest fails at once.
spin() = while true end
softmax(x) = spin()
scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing) = spin()
self_attention(x, w_q, w_k, w_v; b_q = nothing, b_k = nothing, b_v = nothing, mask = nothing, scale = nothing) = spin()
