# A user's Julia port of softmax and scaled dot-product attention, written from ports/CONTRACT.md
# (not from our port): used to check an installed attention-ports on someone else's code.
const attention_ports = (operations = ["softmax", "scaled_dot_product_attention"],)

function softmax(x)
    e = exp.(x .- maximum(x; dims = 1))  # each column's maximum; an all -Inf column gives NaN
    return e ./ sum(e; dims = 1)
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = scale === nothing ? 1 / sqrt(size(q, 1)) : scale
    scores = s .* (permutedims(k) * q)  # keys x queries
    mask === nothing || (scores = scores .+ mask)
    dead = vec(all(scores .== -Inf; dims = 1))  # queries whose mask removes every key
    scores[:, dead] .= 0
    weights = softmax(scores)
    weights[:, dead] .= 0
    return (output = v * weights, weights = weights)
end
