# KNOWN-BAD test port (tests/test_diagnose.py): a Julia port that builds its scores keys x queries
# (right) but adds the mask as if it were queries x keys, transposing it: the contract's Julia mask
# is already keys x queries (ports/CONTRACT.md, "Layouts"). Right without a mask.
const attention_ports = (operations = ["scaled_dot_product_attention"],)

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = scale === nothing ? 1 / sqrt(size(q, 1)) : scale
    scores = s .* (permutedims(k) * q)          # keys x queries
    mask === nothing || (scores = scores .+ permutedims(mask))  # BUG: the mask is key x query already
    e = exp.(scores .- maximum(scores; dims = 1))
    weights = e ./ sum(e; dims = 1)
    return (output = v * weights, weights = weights)
end
