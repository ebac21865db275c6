# A user port that forgot the layout: it treats tokens as rows, like NumPy (q is n_q x d_k),
# so it normalises rows and returns weights n_q x n_k and output n_q x d_v. On square inputs it
# runs without error; the numbers are wrong.
softmax(x) = (e = exp.(x .- maximum(x; dims = 2)); e ./ sum(e; dims = 2))

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = q * k' .* (scale === nothing ? 1 / sqrt(size(q, 2)) : scale)
    mask === nothing || (s = s .+ mask)
    w = softmax(s)
    return (output = w * v, weights = w)
end
