# Fault: a port that defines a broken softmax in Main and commits type piracy on Base (a
# different exp for every Float64 matrix). It breaks its own worker's Base; no other port, ours
# included, may notice: each port has its own Julia process.
Core.eval(Main, :(softmax(x) = error("the global softmax left by pollutes_globals.jl")))
Base.exp(x::Matrix{Float64}) = error("Base.exp pirated by pollutes_globals.jl")

softmax(x) = (e = exp.(x .- maximum(x; dims = 1)); e ./ sum(e; dims = 1))

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = (k' * q) .* (scale === nothing ? 1 / sqrt(size(q, 1)) : scale)   # (n_k, n_q)
    mask === nothing || (s = s .+ mask)
    e = exp.(s .- maximum(s; dims = 1))
    w = e ./ sum(e; dims = 1)
    return (output = v * w, weights = w)
end
