# A port that declares scaled dot-product attention and returns its output but not its weights
# (tests/test_verdict_agreement.py): every front end must fail those cases, not call them missing.
const attention_ports = (operations = ["scaled_dot_product_attention"],)

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = scale === nothing ? 1 / sqrt(size(q, 1)) : scale
    scores = s .* (permutedims(k) * q)  # keys x queries
    mask === nothing || (scores = scores .+ mask)
    e = exp.(scores .- maximum(scores; dims = 1))
    weights = e ./ sum(e; dims = 1)
    return (output = v * weights,)
end
