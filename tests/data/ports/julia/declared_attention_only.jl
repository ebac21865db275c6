# A port that declares what it offers (ports/CONTRACT.md, "Declaring what a port offers"). Like
# seed 003, it has a helper called `softmax` that normalises the WHOLE array, not each column: not
# the contract's softmax. Undeclared, it would be called for every softmax case and fail them all;
# the declaration makes those cases `missing`. It also declares NNlib's convention for a fully
# masked query (NaN), which the suite reads and reports.
const attention_ports = (operations = ["scaled_dot_product_attention"], masked_query = "nan")

softmax(x) = (e = exp.(x .- maximum(x)); e ./ sum(e))

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = (k' * q) .* (scale === nothing ? 1 / sqrt(size(q, 1)) : scale)   # (n_k, n_q)
    mask === nothing || (s = s .+ mask)
    w = hcat([softmax(c) for c in eachcol(s)]...)                         # the helper, per query
    return (output = v * w, weights = w)
end

self_attention(x, w_q, w_k, w_v; kwargs...) = error("not declared, so never called")
