# A CORRECT user port (issue 19): the softmax in the log domain, w = exp(x - lse) with
# lse = m + log(sum(exp(x - m))), the way a numerically careful Julia user (NNlib's logsumexp)
# writes it. `x - lse` rounds at the size of the score itself, so on logits of order 1e3 every
# weight carries a relative error of about u * |max score| (~1e-13): correct, and no porting
# mistake. tests/test_diagnose.py checks that no failure of it (if the bounds fail it at all) is
# blamed on a mistake.
const attention_ports = (operations = ["softmax", "scaled_dot_product_attention", "self_attention"],)

function softmax(x)
    m = maximum(x; dims = 1)
    lse = m .+ log.(sum(exp.(x .- m); dims = 1))
    return exp.(x .- lse)
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

dense(w, x, b) = b === nothing ? w * x : w * x .+ b

function self_attention(x, w_q, w_k, w_v; b_q = nothing, b_k = nothing, b_v = nothing, mask = nothing, scale = nothing)
    q, k, v = dense(w_q, x, b_q), dense(w_k, x, b_k), dense(w_v, x, b_v)
    r = scaled_dot_product_attention(q, k, v; mask = mask, scale = scale)
    return (q = q, k = k, v = v, weights = r.weights, output = r.output)
end
