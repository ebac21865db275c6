# Fault: softmax ends the Julia process with exit(3). Only that case fails; attention still runs.
softmax(x) = exit(3)

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = (k' * q) .* (scale === nothing ? 1 / sqrt(size(q, 1)) : scale)   # (n_k, n_q)
    mask === nothing || (s = s .+ mask)
    e = exp.(s .- maximum(s; dims = 1))
    w = e ./ sum(e; dims = 1)
    return (output = v * w, weights = w)
end
