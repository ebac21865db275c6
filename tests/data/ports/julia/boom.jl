# A user port whose softmax throws; attention works.
explode(x) = error("boom: softmax got a $(size(x, 1))×$(size(x, 2)) matrix")
softmax(x) = explode(x)

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = (k' * q) .* (scale === nothing ? 1 / sqrt(size(q, 1)) : scale)
    mask === nothing || (s = s .+ mask)
    e = exp.(s .- maximum(s; dims = 1))
    w = e ./ sum(e; dims = 1)
    return (output = v * w, weights = w)
end
