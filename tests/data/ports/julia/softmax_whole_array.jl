# KNOWN-BAD user port: its softmax helper normalises over the WHOLE array, exactly as seed 003's
# published `softmax(x)` does (seed003_scale_bug.jl keeps it verbatim, where it is applied to one
# query's scores at a time and is right). Applied to a keys x queries matrix it is wrong: every
# query's weights are scaled by that query's share of the grand total. Everything else follows
# ports/CONTRACT.md; tests/test_diagnose.py checks the failure says so in Julia's terms.
const attention_ports = (operations = ["softmax", "scaled_dot_product_attention"],)

function softmax(x)
    x = x .- maximum(x)              # the seed's helper, verbatim: one maximum ...
    return exp.(x) ./ sum(exp.(x))   # ... and one sum for the whole array
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = scale === nothing ? 1 / sqrt(size(q, 1)) : scale
    scores = s .* (permutedims(k) * q)  # keys x queries
    mask === nothing || (scores = scores .+ mask)
    weights = softmax(scores)
    return (output = v * weights, weights = weights)
end
