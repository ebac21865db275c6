# A realistic porting mistake: the scale is ignored (every case with d_k > 1 or scale != 1 fails).
const attention_ports = (operations = ["softmax", "scaled_dot_product_attention"],)

function softmax(x)
    e = exp.(x .- maximum(x; dims = 1))  # each column's maximum; an all -Inf column gives NaN
    return e ./ sum(e; dims = 1)
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = 1.0  # BUG: ignores the scale, so 1/sqrt(d_k) is never applied
    scores = s .* (permutedims(k) * q)  # keys x queries
    mask === nothing || (scores = scores .+ mask)
    dead = vec(all(scores .== -Inf; dims = 1))  # queries whose mask removes every key
    scores[:, dead] .= 0
    weights = softmax(scores)
    weights[:, dead] .= 0
    return (output = v * weights, weights = weights)
end
