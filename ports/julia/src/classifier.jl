# Seed 003's attention classifier in Julia: forward, analytic backward, SGD and the training loop,
# feature-major like the seed itself (ports/CONTRACT.md, "Training"). For one sentence of n words
# with e-dimensional embeddings, d = e + 1 and c classes:
#
#   x       = [x_emb; 0 1 ... n-1]                 d × n   (the last row holds the positions)
#   q, k, v = W_* * x .+ b_*                       d × n   (W_* is d × d, b_* length d)
#   weights = softmax(k' * q / sqrt(d))            n × n   (keys × queries, columns sum to 1)
#   z       = v * weights                          d × n
#   f       = W_f * z .+ b_f                       c × n   (W_f is c × d, b_f length c)
#   pooled  = mean of the columns of f; probs = softmax(pooled)           (length c)
#   loss    = -log(probs[label])                   computed as a stable log-softmax
#
# Unlike the seed, the scale is 1/sqrt(d) (the width of q, not sqrt(length(q)) = sqrt(d*n)), the
# backward applies one softmax Jacobian per query (column), and dq, dk carry the 1/sqrt(d) factor.
#
# Labels are 1-based (negative 1, neutral 2, positive 3). `params` is a NamedTuple (a Dict with
# Symbol or String keys works too) with the members w_q b_q w_k b_k w_v b_v w_f b_f; results are
# NamedTuples. Uses `softmax` and `_size_str` from attention.jl: the verifier includes every
# ports/julia/src/*.jl into one module. Standard library only, Julia 1.5 to 1.11.
#
# Generic over the float type T of the parameters (Float64, or Float32 as Flux users train): every
# stage, the gradients, the update and the epoch losses are computed in T; the embeddings and lr
# are converted to it, and no Float64 constant enters the arithmetic.

const CLASSIFIER_PARAMS = (:w_q, :b_q, :w_k, :b_k, :w_v, :b_v, :w_f, :b_f)

# The canonical, concretely typed parameter set every internal function works on (T: its float type).
const ClassifierParams{T} = NamedTuple{CLASSIFIER_PARAMS,
                                       Tuple{Matrix{T},Vector{T},Matrix{T},Vector{T},
                                             Matrix{T},Vector{T},Matrix{T},Vector{T}}}

_param_sizes(p) = join(("$name $(_size_str(p[name]))" for name in CLASSIFIER_PARAMS), ", ")

# One member of a parameter collection (NamedTuple, or Dict with Symbol or String keys); `members`
# names the whole set in the errors (transformer.jl passes the decoder block's and GPT's).
function _get_param(params, name::Symbol, fn::AbstractString, members = CLASSIFIER_PARAMS)
    if params isa NamedTuple
        haskey(params, name) && return params[name]
    elseif params isa AbstractDict
        haskey(params, name) && return params[name]
        haskey(params, String(name)) && return params[String(name)]
    else
        throw(ArgumentError("$fn: params must be a NamedTuple with the members " *
                            "$(join(members, " ")); got a $(typeof(params))"))
    end
    throw(ArgumentError("$fn: params has no member $name; it needs $(join(members, " ")), " *
                        "got $(join(keys(params), " "))"))
end

"""Check `params` (members, shapes, finiteness); return them as a `ClassifierParams{T}` (T: the
float type of their elements, Float64 for integers), d and c."""
function _check_params(params, fn::AbstractString)
    raw = map(name -> _get_param(params, name, fn), CLASSIFIER_PARAMS)
    all(a -> a isa AbstractArray{<:Real}, raw) ||
        throw(ArgumentError("$fn: every member of params must be an array of reals; got " *
                            join(("$name $(typeof(a))" for (name, a) in zip(CLASSIFIER_PARAMS, raw)), ", ")))
    sizes = _param_sizes(NamedTuple{CLASSIFIER_PARAMS}(raw))
    w_q, w_f = raw[1], raw[7]
    ndims(w_q) == 2 && size(w_q, 1) == size(w_q, 2) >= 2 ||
        throw(ArgumentError("$fn: w_q must be a square d×d matrix with d = e + 1 >= 2; got $sizes"))
    d = size(w_q, 1)
    ndims(w_f) == 2 && size(w_f, 2) == d && size(w_f, 1) >= 1 ||
        throw(ArgumentError("$fn: w_f must be c×d = c×$d (applied as w_f * z) with c >= 1 classes; got $sizes"))
    c = size(w_f, 1)
    want = (w_q = (d, d), b_q = (d,), w_k = (d, d), b_k = (d,), w_v = (d, d), b_v = (d,), w_f = (c, d), b_f = (c,))
    for (name, a) in zip(CLASSIFIER_PARAMS, raw)
        shape = length(want[name]) == 1 ? "a vector of length $(want[name][1])" : join(want[name], "×")
        size(a) == want[name] || throw(ArgumentError("$fn: $name must be $shape (d = $d, c = $c); got $sizes"))
        all(isfinite, a) || throw(ArgumentError("$fn: params.$name must be finite; got $sizes"))
    end
    T = float(reduce(promote_type, map(eltype, raw)))
    p = ClassifierParams{T}(map((a, t) -> convert(t, a), raw, fieldtypes(ClassifierParams{T})))
    return p, d, c
end

function _check_x_emb(x_emb, ::Type{T}, d::Int, fn::AbstractString; name = "x_emb") where {T}
    x_emb isa AbstractMatrix{<:Real} && size(x_emb, 1) == d - 1 && size(x_emb, 2) >= 1 ||
        throw(ArgumentError("$fn: $name must be e×n (a token per column) with e = d - 1 = $(d - 1) features and " *
                            "n >= 1 tokens (d = size(w_q, 1) includes the position row); got $name " *
                            "$(x_emb isa AbstractArray ? _size_str(x_emb) : typeof(x_emb))"))
    all(isfinite, x_emb) || throw(ArgumentError("$fn: $name must be finite; got $name $(_size_str(x_emb))"))
    return Matrix{T}(x_emb)
end

function _check_label(label, c::Int, fn::AbstractString; name = "label")
    label isa Real && isfinite(label) && isinteger(label) && 1 <= label <= c ||
        throw(ArgumentError("$fn: $name must be a 1-based class index in 1:$c (negative 1, neutral 2, " *
                            "positive 3); got $(repr(label))"))
    return Int(label)
end

function _check_lr(lr, ::Type{T}, fn::AbstractString) where {T}
    lr isa Real && isfinite(lr) && lr >= 0 ||
        throw(ArgumentError("$fn: lr must be a finite real number >= 0; got $(repr(lr))"))
    return T(lr)
end

function _check_frozen(frozen, fn::AbstractString)
    frozen === nothing && return Symbol[]
    names = frozen isa AbstractString ? [frozen] : frozen
    names isa AbstractVector && all(f -> (f isa AbstractString || f isa Symbol) && Symbol(f) in CLASSIFIER_PARAMS, names) ||
        throw(ArgumentError("$fn: frozen must be a Vector{String} of parameter names among " *
                            "$(join(CLASSIFIER_PARAMS, " ")); got $(repr(frozen))"))
    return Symbol[Symbol(f) for f in names]
end

# --- the model, unchecked ---------------------------------------------------------------------------

function _forward(x_emb::Matrix{T}, p::ClassifierParams{T}) where {T}
    n = size(x_emb, 2)
    x = vcat(x_emb, T.(0:(n - 1))')                      # (d, n): the position row 0..n-1 last
    d = size(x, 1)
    q = p.w_q * x .+ p.b_q                               # (d, n)
    k = p.w_k * x .+ p.b_k                               # (d, n)
    v = p.w_v * x .+ p.b_v                               # (d, n)
    weights = softmax((k' * q) ./ sqrt(T(d)))            # (n_k, n_q), each column (query) sums to 1
    z = v * weights                                      # (d, n_k) * (n_k, n_q) = (d, n_q)
    f = p.w_f * z .+ p.b_f                               # (c, d) * (d, n) = (c, n)
    pooled = vec(sum(f; dims = 2)) ./ n                  # (c,): the mean over tokens
    probs = softmax(pooled)                              # (c,)
    return (x = x, q = q, k = k, v = v, weights = weights, z = z, f = f, pooled = pooled, probs = probs)
end

# -log(softmax(pooled)[label]) as a stable log-softmax.
function _loss(pooled::Vector{<:AbstractFloat}, label::Int)
    shifted = pooled .- maximum(pooled)                  # (c,)
    return log(sum(exp, shifted)) - shifted[label]
end

# The exact gradient of the loss for every parameter, from the forward stages `fw`.
function _backward(fw, label::Int, p::ClassifierParams{T}) where {T}
    d, n = size(fw.x)
    s = 1 / sqrt(T(d))
    d_pooled = copy(fw.probs)
    d_pooled[label] -= 1                                 # (c,): probs - one_hot(label)
    d_f = repeat(d_pooled ./ n, 1, n)                    # (c, n): the mean gives each column 1/n
    d_z = p.w_f' * d_f                                   # (d, c) * (c, n) = (d, n)
    d_weights = fw.v' * d_z                              # (n_k, d) * (d, n_q) = (n_k, n_q)
    d_v = d_z * fw.weights'                              # (d, n_q) * (n_q, n_k) = (d, n_k)
    # one softmax Jacobian per query (column j): dS[i,j] = A[i,j] (dA[i,j] - sum_l dA[l,j] A[l,j])
    d_scores = fw.weights .* (d_weights .- sum(d_weights .* fw.weights; dims = 1))   # (n_k, n_q)
    d_q = (fw.k * d_scores) .* s                         # (d, n_k) * (n_k, n_q) = (d, n_q)
    d_k = (fw.q * d_scores') .* s                        # (d, n_q) * (n_q, n_k) = (d, n_k)
    return (w_q = d_q * fw.x', b_q = vec(sum(d_q; dims = 2)),      # (d, d), (d,)
            w_k = d_k * fw.x', b_k = vec(sum(d_k; dims = 2)),
            w_v = d_v * fw.x', b_v = vec(sum(d_v; dims = 2)),
            w_f = d_f * fw.z', b_f = vec(sum(d_f; dims = 2)))      # (c, d), (c,)
end

# p - lr * grad for every parameter not in `frozen` (those come back as they were).
function _sgd(p::ClassifierParams{T}, grads, lr::T, frozen::Vector{Symbol}) where {T}
    names = NamedTuple{CLASSIFIER_PARAMS}(CLASSIFIER_PARAMS)
    return map((a, g, name) -> name in frozen ? copy(a) : a .- lr .* g, p, grads, names)::ClassifierParams{T}
end

function _step(x_emb::Matrix{T}, label::Int, p::ClassifierParams{T}, lr::T, frozen::Vector{Symbol}) where {T}
    fw = _forward(x_emb, p)
    grads = _backward(fw, label, p)
    return (loss = _loss(fw.pooled, label), probs = fw.probs, grads = grads, params = _sgd(p, grads, lr, frozen))
end

# --- the operations -----------------------------------------------------------------------------

"""
    classifier_forward(x_emb, params)

Every stage of the forward pass for one sentence: `x_emb` is e × n (a token per column), `params`
a NamedTuple `(w_q, b_q, w_k, b_k, w_v, b_v, w_f, b_f)` with `w_*` d × d (d = e + 1), `w_f` c × d.
Returns `(x, q, k, v, weights, z, f, pooled, probs)`: `x`, `q`, `k`, `v`, `z` d × n (the last row of
`x` holds the positions 0..n-1), `weights` n × n (keys × queries, columns sum to 1), `f` c × n,
`pooled` and `probs` of length c.
"""
function classifier_forward(x_emb, params)
    fn = "classifier_forward"
    p, d, _ = _check_params(params, fn)
    T = eltype(p.w_q)
    return _forward(_check_x_emb(x_emb, T, d, fn), p)
end

"""
    classifier_step(x_emb, label, params, lr; frozen = String[])

One SGD step on one sentence with 1-based class `label`: every parameter not named in `frozen`
becomes `p - lr * grad`. Returns `(loss, probs, grads, params)`: the loss and probabilities before
the update, the gradient of every parameter (frozen ones included) and the updated parameters.
"""
function classifier_step(x_emb, label, params, lr; frozen = String[])
    fn = "classifier_step"
    p, d, c = _check_params(params, fn)
    T = eltype(p.w_q)
    x = _check_x_emb(x_emb, T, d, fn)
    return _step(x, _check_label(label, c, fn), p, _check_lr(lr, T, fn), _check_frozen(frozen, fn))
end

"""
    classifier_train(tokens, lengths, labels, params, lr, epochs; frozen = String[])

`epochs` passes over a data set, one `classifier_step` per sentence in order. `tokens` is e × N,
every sentence's columns in order; sentence i has `lengths[i]` columns (0: no known words, skipped
and not counted) and class `labels[i]` (1-based). Positions restart at 0 in every sentence.
Returns `(epoch_losses, params)`: per epoch the mean over the trained sentences of each step's
pre-update loss, and the final parameters.
"""
function classifier_train(tokens, lengths, labels, params, lr, epochs; frozen = String[])
    fn = "classifier_train"
    p, d, c = _check_params(params, fn)
    T = eltype(p.w_q)
    lr = _check_lr(lr, T, fn)
    frozen = _check_frozen(frozen, fn)
    epochs isa Real && isinteger(epochs) && epochs >= 0 ||
        throw(ArgumentError("$fn: epochs must be a whole number >= 0; got $(repr(epochs))"))
    tokens isa AbstractMatrix{<:Real} && size(tokens, 1) == d - 1 ||
        throw(ArgumentError("$fn: tokens must be e×N (a token per column) with e = d - 1 = $(d - 1); " *
                            "got tokens $(_size_str(tokens)), w_q $(_size_str(p.w_q))"))
    lengths isa AbstractVector && labels isa AbstractVector && !isempty(lengths) && length(labels) == length(lengths) ||
        throw(ArgumentError("$fn: lengths and labels must be vectors of the same non-zero length (one per " *
                            "sentence); got lengths $(_size_str(lengths)), labels $(_size_str(labels))"))
    all(l -> l isa Real && isinteger(l) && l >= 0, lengths) && sum(lengths) == size(tokens, 2) ||
        throw(ArgumentError("$fn: lengths must be whole numbers >= 0 summing to size(tokens, 2) = " *
                            "$(size(tokens, 2)); got $(length(lengths)) lengths summing to $(sum(lengths))"))
    ys = [_check_label(y, c, fn; name = "labels[$i]") for (i, y) in enumerate(labels)]

    ends = cumsum(Int.(lengths))
    trained = [i for i in eachindex(lengths) if lengths[i] > 0]
    isempty(trained) && epochs > 0 &&
        throw(ArgumentError("$fn: the data set has $(length(lengths)) sentences but none with a token"))
    sentences = [_check_x_emb(tokens[:, (ends[i] - lengths[i] + 1):ends[i]], T, d, fn; name = "sentence $i")
                 for i in trained]                       # each (e, n_i)
    epoch_losses = zeros(T, Int(epochs))
    for epoch in 1:Int(epochs)
        total = zero(T)
        for (j, i) in enumerate(trained)
            step = _step(sentences[j], ys[i], p, lr, frozen)
            isfinite(step.loss) && all(a -> all(isfinite, a), step.params) ||
                error("$fn: training diverged (non-finite loss or parameters) in epoch $epoch at sentence $i " *
                      "(n = $(lengths[i])); lr = $lr is too large")
            p = step.params
            total += step.loss                           # in data set order, then divided by the count
        end
        epoch_losses[epoch] = total / length(trained)
    end
    return (epoch_losses = epoch_losses, params = p)
end
