# Fault: softmax sends SIGTERM to its own process. Only that case fails; attention still runs.
softmax(x) = (ccall(:kill, Cint, (Cint, Cint), getpid(), 15); sleep(30); x)

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = (k' * q) .* (scale === nothing ? 1 / sqrt(size(q, 1)) : scale)   # (n_k, n_q)
    mask === nothing || (s = s .+ mask)
    e = exp.(s .- maximum(s; dims = 1))
    w = e ./ sum(e; dims = 1)
    return (output = v * w, weights = w)
end
