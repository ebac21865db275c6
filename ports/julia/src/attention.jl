# Attention forward operations in Julia, feature-major (the layout of seed 003 and NNlib):
# a token is a column, so a sequence of n tokens with d features is a d x n matrix, projections
# are applied as `W * x` with W of size d_out x d_in, and attention weights are n_k x n_q with
# each column (one query) summing to 1. See ports/CONTRACT.md, Julia section.
#
# Standard library only, Julia 1.5 to 1.11. The functions are top-level on purpose: the port
# verifier includes this file into a fresh anonymous module and calls them by name.

"""
    softmax(x; dims = 1)

Numerically stable softmax along `dims` (by default each column). The maximum is subtracted
first, so scores of 1e3 do not overflow. A slice that is entirely `-Inf` has no distribution and
comes back as `NaN` (0/0), like `torch.softmax`; attention handles fully masked queries itself.
"""
function softmax(x::AbstractArray{<:Real}; dims = 1)
    ndims(x) >= 1 || throw(ArgumentError("softmax: x must have at least one dimension, got size $(size(x))"))
    peak = maximum(x; dims = dims)       # (1, m) for a (n, m) matrix and dims = 1
    e = exp.(x .- peak)                  # (n, m); -Inf - -Inf = NaN on an all -Inf column
    return e ./ sum(e; dims = dims)      # (n, m), each column sums to 1
end

_size_str(a) = a === nothing ? "nothing" : join(size(a), "×")

"""
    scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)

`q` is d_k × n_q, `k` is d_k × n_k, `v` is d_v × n_k, `mask` an additive n_k × n_q matrix
(0 keeps a key, -Inf removes it). `scale = nothing` means `1 / sqrt(d_k)`.
Returns `(output = d_v × n_q, weights = n_k × n_q)`. A query whose mask removes every key gets
all-zero weights and an all-zero output column (like PyTorch) instead of NaN.
"""
function scaled_dot_product_attention(q::AbstractMatrix{<:Real}, k::AbstractMatrix{<:Real},
                                      v::AbstractMatrix{<:Real}; mask = nothing, scale = nothing)
    (d_k, n_q), (d_k2, n_k), (d_v, n_k2) = size(q), size(k), size(v)
    sizes = "q $(_size_str(q)) (d_k×n_q), k $(_size_str(k)) (d_k×n_k), v $(_size_str(v)) (d_v×n_k), " *
            "mask $(_size_str(mask)) (n_k×n_q)"
    d_k == d_k2 || throw(ArgumentError("scaled_dot_product_attention: q and k need the same d_k (rows); got $sizes"))
    n_k == n_k2 || throw(ArgumentError("scaled_dot_product_attention: k and v need the same n_k (columns); got $sizes"))
    mask === nothing || size(mask) == (n_k, n_q) ||
        throw(ArgumentError("scaled_dot_product_attention: mask must be n_k×n_q = $(n_k)×$(n_q); got $sizes"))
    # The default scale in q's own type (1 / sqrt(d_k) would be a Float64 and promote Float32 scores).
    s = scale === nothing ? inv(sqrt(float(eltype(q))(d_k))) : float(scale)
    isfinite(s) || throw(ArgumentError("scaled_dot_product_attention: scale must be finite, got $scale"))

    scores = (k' * q) .* s                                   # (n_k, n_q): key i · query j
    if mask !== nothing
        scores = scores .+ mask                              # (n_k, n_q), additive
    end
    dead = vec(all(isequal(-Inf), scores; dims = 1))         # (n_q,) queries that see no key
    weights = softmax(scores)                                # (n_k, n_q), columns sum to 1
    weights[:, dead] .= 0                                    # NaN columns -> zero weights
    output = v * weights                                     # (d_v, n_k) * (n_k, n_q) = (d_v, n_q)
    return (output = output, weights = weights)
end

# W * x (+ b): (d_out, d_in) * (d_in, n) = (d_out, n), b of length d_out broadcast over columns.
function _project(x::AbstractMatrix, w::AbstractMatrix, b, name::AbstractString)
    size(w, 2) == size(x, 1) ||
        throw(ArgumentError("w_$name must be d_out×d_in with d_in = x's feature size (rows); " *
                            "got x $(_size_str(x)), w_$name $(_size_str(w))"))
    y = w * x                                                # (d_out, n)
    b === nothing && return y
    length(b) == size(w, 1) && ndims(b) == 1 ||
        throw(ArgumentError("b_$name must be a vector of length d_out = $(size(w, 1)); " *
                            "got b_$name $(_size_str(b)), w_$name $(_size_str(w))"))
    return y .+ b                                            # (d_out, n) .+ (d_out,)
end

"""
    self_attention(x, w_q, w_k, w_v; b_q = nothing, b_k = nothing, b_v = nothing,
                   mask = nothing, scale = nothing)

`x` is d_in × n, `w_*` are d_out × d_in (d_out of v may differ from that of q and k).
Returns `(q = d_k × n, k = d_k × n, v = d_v × n, weights = n × n, output = d_v × n)`.
"""
function self_attention(x::AbstractMatrix{<:Real}, w_q::AbstractMatrix{<:Real}, w_k::AbstractMatrix{<:Real},
                        w_v::AbstractMatrix{<:Real}; b_q = nothing, b_k = nothing, b_v = nothing,
                        mask = nothing, scale = nothing)
    q = _project(x, w_q, b_q, "q")                           # (d_k, n)
    k = _project(x, w_k, b_k, "k")                           # (d_k, n)
    v = _project(x, w_v, b_v, "v")                           # (d_v, n)
    size(q, 1) == size(k, 1) ||
        throw(ArgumentError("self_attention: w_q and w_k must project to the same d_k; " *
                            "got w_q $(_size_str(w_q)), w_k $(_size_str(w_k)), x $(_size_str(x))"))
    att = scaled_dot_product_attention(q, k, v; mask = mask, scale = scale)
    return (q = q, k = k, v = v, weights = att.weights, output = att.output)  # weights (n, n), output (d_v, n)
end

"""
    multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, num_heads;
                         b_q = nothing, b_k = nothing, b_v = nothing, b_o = nothing, mask = nothing)

PyTorch's packed `nn.MultiheadAttention`: every `w_*` is d_model × d_model; head `i` uses the
projected features (rows) `((i-1)*d_head+1):(i*d_head)`, d_head = d_model ÷ num_heads, with scale
`1/sqrt(d_head)` and the same mask. `query` is d_model × n_q, `key`/`value` d_model × n_k.
Returns `(output = d_model × n_q, weights = n_k × n_q × num_heads)`.
"""
function multi_head_attention(query::AbstractMatrix{<:Real}, key::AbstractMatrix{<:Real},
                              value::AbstractMatrix{<:Real}, w_q::AbstractMatrix{<:Real},
                              w_k::AbstractMatrix{<:Real}, w_v::AbstractMatrix{<:Real},
                              w_o::AbstractMatrix{<:Real}, num_heads::Integer;
                              b_q = nothing, b_k = nothing, b_v = nothing, b_o = nothing, mask = nothing)
    d_model, n_q = size(query)
    n_k = size(key, 2)
    sizes = "query $(_size_str(query)), key $(_size_str(key)), value $(_size_str(value)), " *
            "w_q $(_size_str(w_q)), w_k $(_size_str(w_k)), w_v $(_size_str(w_v)), w_o $(_size_str(w_o))"
    size(key, 1) == d_model && size(value) == size(key) ||
        throw(ArgumentError("multi_head_attention: query, key and value need the same d_model (rows), " *
                            "key and value the same n_k (columns); got $sizes"))
    all(w -> size(w) == (d_model, d_model), (w_q, w_k, w_v, w_o)) ||
        throw(ArgumentError("multi_head_attention: every w_* must be d_model×d_model = $(d_model)×$(d_model); got $sizes"))
    num_heads >= 1 && d_model % num_heads == 0 ||
        throw(ArgumentError("multi_head_attention: num_heads = $num_heads must be a positive divisor of d_model = $d_model"))
    d_head = d_model ÷ num_heads

    q = _project(query, w_q, b_q, "q")                       # (d_model, n_q)
    k = _project(key, w_k, b_k, "k")                         # (d_model, n_k)
    v = _project(value, w_v, b_v, "v")                       # (d_model, n_k)
    concat = similar(q, float(eltype(q)))                    # (d_model, n_q): head outputs stacked by rows
    weights = similar(q, float(eltype(q)), n_k, n_q, num_heads)  # (n_k, n_q, h)
    for h in 1:num_heads
        rows = ((h - 1) * d_head + 1):(h * d_head)
        att = scaled_dot_product_attention(q[rows, :], k[rows, :], v[rows, :];
                                           mask = mask)      # output (d_head, n_q), weights (n_k, n_q)
        concat[rows, :] = att.output
        weights[:, :, h] = att.weights
    end
    output = _project(concat, w_o, b_o, "o")                 # (d_model, n_q)
    return (output = output, weights = weights)
end
