# A user port in the style of NNlib.jl's attention (written for these tests, not derived from our
# port): feature-major (tokens are columns), and NNlib's convention for a query whose mask removes
# every key: nothing special-cases it, so the softmax of its all -Inf column is 0/0 = NaN, and that
# query's weights and outputs are NaN (in every head, and through w_o). It declares so; the suite
# then judges those rows against NaN, and every other row exactly as for any port.
const attention_ports = (
    operations = ["softmax", "scaled_dot_product_attention", "self_attention", "multi_head_attention"],
    masked_query = "nan",
)

# x: (n_k, n_q); each column is one query's scores
function softmax(x)
    e = exp.(x .- maximum(x; dims = 1))
    return e ./ sum(e; dims = 1)
end

# q: (d_k, n_q), k: (d_k, n_k), v: (d_v, n_k), mask: (n_k, n_q) additive
function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = scale === nothing ? inv(sqrt(size(q, 1))) : scale
    scores = (k' * q) .* s                          # (n_k, n_q)
    mask === nothing || (scores = scores .+ mask)
    w = softmax(scores)                             # (n_k, n_q)
    return (output = v * w, weights = w)            # (d_v, n_q), (n_k, n_q)
end

dense(w, x, b) = b === nothing ? w * x : w * x .+ b

function self_attention(x, w_q, w_k, w_v; b_q = nothing, b_k = nothing, b_v = nothing, mask = nothing, scale = nothing)
    q, k, v = dense(w_q, x, b_q), dense(w_k, x, b_k), dense(w_v, x, b_v)
    r = scaled_dot_product_attention(q, k, v; mask = mask, scale = scale)
    return (q = q, k = k, v = v, weights = r.weights, output = r.output)
end

# query: (d, n_q), key/value: (d, n_k), w_*: (d, d); head h owns the rows (h-1)*dh+1 : h*dh
function multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, num_heads;
                              b_q = nothing, b_k = nothing, b_v = nothing, b_o = nothing, mask = nothing)
    q, k, v = dense(w_q, query, b_q), dense(w_k, key, b_k), dense(w_v, value, b_v)
    dh = size(q, 1) ÷ num_heads
    heads = [scaled_dot_product_attention(q[r, :], k[r, :], v[r, :]; mask = mask)
             for r in ((h - 1) * dh + 1 : h * dh for h in 1:num_heads)]
    concat = reduce(vcat, [h.output for h in heads])                 # (d, n_q)
    weights = cat([h.weights for h in heads]...; dims = 3)           # (n_k, n_q, num_heads)
    return (output = dense(w_o, concat, b_o), weights = weights)
end
