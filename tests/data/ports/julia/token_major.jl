# KNOWN-BAD test port (tests/test_diagnose.py): written from ports/CONTRACT.md by someone who
# thinks token-major, as in NumPy or R. Both functions compute the right numbers but hand them back
# in the reference layout instead of Julia's: softmax returns its (rows x entries) working copy
# and attention returns its weights queries x keys. Every other number is right.
const attention_ports = (operations = ["softmax", "scaled_dot_product_attention"],)

function softmax(x)
    rows = permutedims(x)                       # one softmax vector per row, as in NumPy
    e = exp.(rows .- maximum(rows; dims = 2))
    return e ./ sum(e; dims = 2)                # BUG: never turned back into one vector per column
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = scale === nothing ? 1 / sqrt(size(q, 1)) : scale
    scores = s .* (permutedims(k) * q)          # keys x queries
    mask === nothing || (scores = scores .+ mask)
    e = exp.(scores .- maximum(scores; dims = 1))
    weights = e ./ sum(e; dims = 1)
    return (output = v * weights, weights = permutedims(weights))  # BUG: queries x keys
end
