# The transformer in Julia: GPT-2's pre-norm decoder (ports/CONTRACT.md, "The transformer"),
# feature-major like attention.jl: a token is a column, so a sequence is d × n, a weight is
# d_out × d_in applied as `W * x .+ b`, and the logits are vocab × n (as Flux's Dense and
# Embedding). Built from the port's own pieces: `_project` and `scaled_dot_product_attention`
# (attention.jl), `layer_norm` (norms.jl), `gelu` (activations.jl), `_get_param` (classifier.jl);
# every file of ports/julia/src is included into one module.
#
#   feed_forward(x)  = W_2 * gelu(W_1 * x .+ b_1) .+ b_2                 d × n   (W_1: d_ff × d)
#   h                = x + attn(layer_norm(x; ln1_w, ln1_b))               d × n
#   decoder_block(x) = h + feed_forward(layer_norm(h; ln2_w, ln2_b))       d × n
#   attn(a)          = W_o * vcat(head_1, ..., head_H) .+ b_o, each head a causal SDPA on its
#                      contiguous block of d_head = d ÷ H rows of W_q a, W_k a, W_v a (scale 1/sqrt(d_head))
#   gpt_forward      = W_head * layer_norm(blocks(wte[:, tokens] .+ wpe[:, 1:n]); lnf_w, lnf_b)   vocab × n
#
# Generic over the float type T of x (the parameters'): Float32 in, Float32 out (the causal mask is
# built in T, eps converted by layer_norm). Absent options are `nothing`: eps means 1e-5 (torch's),
# approximate "none" (gelu's erf form). Standard library only, Julia 1.5 to 1.11.

const FFN_PARAMS = (:w_1, :b_1, :w_2, :b_2)
const DECODER_BLOCK_PARAMS = (:ln1_w, :ln1_b, :w_q, :b_q, :w_k, :b_k, :w_v, :b_v, :w_o, :b_o,
                              :ln2_w, :ln2_b, FFN_PARAMS...)
const GPT_PARAMS = (:wte, :wpe, DECODER_BLOCK_PARAMS..., :lnf_w, :lnf_b, :w_head)
const DEFAULT_NORM_EPS = 1e-5

_members_str(p, names) = join(("$name $(_size_str(p[name]))" for name in names), ", ")

# The members `names` of `params` as a NamedTuple of real arrays, each of the size `want` gives it
# ((d,) for a vector, (d_out, d_in) for a matrix); an error names every member's size.
function _check_members(params, names, want::NamedTuple, fn::AbstractString, members = names)
    p = NamedTuple{names}(map(name -> _get_param(params, name, fn, members), names))
    all(a -> a isa AbstractArray{<:Real}, p) ||
        throw(ArgumentError("$fn: every member of params must be an array of reals; got " *
                            join(("$name $(typeof(a))" for (name, a) in pairs(p)), ", ")))
    for name in names
        a = p[name]
        size(a) == want[name] ||
            throw(ArgumentError("$fn: params.$name must be $(join(want[name], "×")) " *
                                "($(length(want[name]) == 1 ? "a vector" : "d_out×d_in, applied as W * x")); " *
                                "got $(_members_str(p, names))"))
        all(isfinite, a) || throw(ArgumentError("$fn: params.$name ($(_size_str(a))) must be finite"))
    end
    return p
end

function _check_heads(num_heads, d::Int, fn::AbstractString)
    num_heads isa Integer && num_heads >= 1 && d % num_heads == 0 ||
        throw(ArgumentError("$fn: num_heads = $(repr(num_heads)) must be a positive integer dividing d = $d"))
    return Int(num_heads)
end

# query j may attend to keys 1..j: an additive n_k × n_q mask in T (0 keeps, -Inf removes)
function _causal_mask(::Type{T}, n::Int) where {T}
    return [key <= query ? zero(T) : T(-Inf) for key in 1:n, query in 1:n]   # n × n (keys × queries)
end

# Causal multi-head self-attention of `a` (d × n) with its output projection; heads are contiguous
# blocks of d_head rows of the projected q, k, v (as in multi-head attention), SDPA's default scale
# 1/sqrt(d_head).
function _causal_self_attention(a::AbstractMatrix{T}, p, num_heads::Int) where {T<:AbstractFloat}
    d, n = size(a)
    d_head = d ÷ num_heads
    q = _project(a, p.w_q, p.b_q, "q")                           # d × n
    k = _project(a, p.w_k, p.b_k, "k")                           # d × n
    v = _project(a, p.w_v, p.b_v, "v")                           # d × n
    mask = _causal_mask(T, n)                                    # n × n (keys × queries)
    heads = map(1:num_heads) do h
        rows = ((h - 1) * d_head + 1):(h * d_head)               # head h's projected features
        scaled_dot_product_attention(q[rows, :], k[rows, :], v[rows, :]; mask = mask).output  # d_head × n
    end
    return _project(reduce(vcat, heads), p.w_o, p.b_o, "o")      # (d × d) * (d × n) = d × n
end

"""
    feed_forward(x, w_1, b_1, w_2, b_2; approximate = "none")

Position-wise: `w_2 * gelu(w_1 * x .+ b_1) .+ b_2`. `x` is d × n, `w_1` d_ff × d, `b_1` length
d_ff, `w_2` d × d_ff, `b_2` length d; gelu's form as `approximate` asks. Returns `y`, d × n.
"""
function feed_forward(x::AbstractMatrix{T}, w_1::AbstractMatrix{<:Real}, b_1::AbstractVector{<:Real},
                      w_2::AbstractMatrix{<:Real}, b_2::AbstractVector{<:Real};
                      approximate = "none") where {T<:AbstractFloat}
    size(w_2) == reverse(size(w_1)) ||
        throw(ArgumentError("feed_forward: w_1 must be d_ff×d and w_2 d×d_ff (applied as W * x); got " *
                            "x $(_size_str(x)), w_1 $(_size_str(w_1)), w_2 $(_size_str(w_2))"))
    hidden = _project(x, w_1, b_1, "1")                          # (d_ff × d) * (d × n) = d_ff × n
    activated = gelu(hidden; approximate = approximate)          # d_ff × n
    return _project(activated, w_2, b_2, "2")                    # (d × d_ff) * (d_ff × n) = d × n
end
feed_forward(x::AbstractMatrix{<:Integer}, args...; kw...) = feed_forward(float(x), args...; kw...)

function _block_params(params, d::Int, fn::AbstractString)
    d_ff = size(_get_param(params, :w_1, fn, DECODER_BLOCK_PARAMS), 1)
    want = (ln1_w = (d,), ln1_b = (d,), w_q = (d, d), b_q = (d,), w_k = (d, d), b_k = (d,),
            w_v = (d, d), b_v = (d,), w_o = (d, d), b_o = (d,), ln2_w = (d,), ln2_b = (d,),
            w_1 = (d_ff, d), b_1 = (d_ff,), w_2 = (d, d_ff), b_2 = (d,))
    return _check_members(params, DECODER_BLOCK_PARAMS, want, fn)
end

# One block on checked parameters (the whole model calls it once per block).
function _decoder_block(x::AbstractMatrix{T}, p, num_heads::Int, eps, approximate) where {T<:AbstractFloat}
    a = layer_norm(x; weight = p.ln1_w, bias = p.ln1_b, eps = eps)           # d × n
    h = x .+ _causal_self_attention(a, p, num_heads)                          # d × n: first residual
    m = layer_norm(h; weight = p.ln2_w, bias = p.ln2_b, eps = eps)           # d × n
    return h .+ feed_forward(m, p.w_1, p.b_1, p.w_2, p.b_2; approximate = approximate)  # d × n
end

"""
    decoder_block(x, params, num_heads; eps = nothing, approximate = "none")

GPT-2's pre-norm block on `x` (d × n, a token per column): `h = x + attn(layer_norm(x))`,
`y = h + feed_forward(layer_norm(h))`, attention causal (query j sees keys 1..j). `params` is a
NamedTuple (or Dict) with `ln1_w ln1_b w_q b_q w_k b_k w_v b_v w_o b_o ln2_w ln2_b w_1 b_1 w_2 b_2`:
`w_q`... d × d, `w_1` d_ff × d, `w_2` d × d_ff, vectors of their output's length. `eps` is the
layer norms' (1e-5 when nothing). Returns `y`, d × n.
"""
function decoder_block(x::AbstractMatrix{T}, params, num_heads; eps = nothing,
                       approximate = "none") where {T<:AbstractFloat}
    fn = "decoder_block"
    d = size(x, 1)
    p = _block_params(params, d, fn)
    heads = _check_heads(num_heads, d, fn)
    return _decoder_block(x, p, heads, eps === nothing ? DEFAULT_NORM_EPS : eps, approximate)
end
decoder_block(x::AbstractMatrix{<:Integer}, args...; kw...) = decoder_block(float(x), args...; kw...)

# The GPT's inputs checked (the forward and its gradient share them): the parameters as a
# NamedTuple of GPT_PARAMS (every size from wte, ln1_w, w_1 and wpe), the tokens as Ints, the
# number of heads and eps (nothing: 1e-5).
function _check_gpt(tokens, params, num_heads, eps, fn::AbstractString)
    wte = _get_param(params, :wte, fn, GPT_PARAMS)
    wte isa AbstractMatrix{<:Real} || throw(ArgumentError("$fn: params.wte must be d×vocab; got $(typeof(wte))"))
    (d, vocab), n = size(wte), length(tokens)
    n_layer = size(_get_param(params, :ln1_w, fn, GPT_PARAMS), 2)
    d_ff = size(_get_param(params, :w_1, fn, GPT_PARAMS), 1)
    n_ctx = size(_get_param(params, :wpe, fn, GPT_PARAMS), 2)
    want = (wte = (d, vocab), wpe = (d, n_ctx), lnf_w = (d,), lnf_b = (d,), w_head = (vocab, d),
            ln1_w = (d, n_layer), ln1_b = (d, n_layer), w_q = (d, d, n_layer), b_q = (d, n_layer),
            w_k = (d, d, n_layer), b_k = (d, n_layer), w_v = (d, d, n_layer), b_v = (d, n_layer),
            w_o = (d, d, n_layer), b_o = (d, n_layer), ln2_w = (d, n_layer), ln2_b = (d, n_layer),
            w_1 = (d_ff, d, n_layer), b_1 = (d_ff, n_layer), w_2 = (d, d_ff, n_layer), b_2 = (d, n_layer))
    p = _check_members(params, GPT_PARAMS, want, "$fn (d = $d, d_ff = $d_ff, n_layer = $n_layer, block axis last)")
    1 <= n <= n_ctx ||
        throw(ArgumentError("$fn: tokens must hold 1 to n_ctx = $n_ctx ids (wpe is $(_size_str(p.wpe))); got $n"))
    all(t -> isinteger(t) && 1 <= t <= vocab, tokens) ||
        throw(ArgumentError("$fn: tokens must be 1-based token ids in 1:$vocab (wte is d×vocab = " *
                            "$(_size_str(p.wte))); got $(repr(tokens))"))
    heads = _check_heads(num_heads, d, fn)
    return (p = p, tokens = Int.(tokens), n_layer = n_layer, heads = heads,
            eps = eps === nothing ? DEFAULT_NORM_EPS : eps)
end

"""
    gpt_forward(tokens, params, num_heads; eps = nothing, approximate = "none")

GPT-2's forward pass: `tokens` are n 1-based token ids; `params` holds `wte` (d × vocab, column t is
token t, as Flux's `Embedding`), `wpe` (d × n_ctx, column p is position p), every block's parameters
stacked along a last block axis (`w_q[:, :, b]` d × d, `ln1_w[:, b]`, ...), `lnf_w`, `lnf_b` and
`w_head` (vocab × d). Returns `logits`, vocab × n: a column per position.
"""
function gpt_forward(tokens::AbstractVector{<:Real}, params, num_heads; eps = nothing, approximate = "none")
    c = _check_gpt(tokens, params, num_heads, eps, "gpt_forward")
    p, n_layer, heads, e = c.p, c.n_layer, c.heads, c.eps
    d, n = size(p.wte, 1), length(tokens)

    x = p.wte[:, Int.(tokens)] .+ p.wpe[:, 1:n]                           # d × n: token + position
    for b in 1:n_layer
        params_b = map(a -> selectdim(a, ndims(a), b), NamedTuple{DECODER_BLOCK_PARAMS}(p))  # block b's: d × d, d, ...
        x = _decoder_block(x, params_b, heads, e, approximate)               # d × n
    end
    final = layer_norm(x; weight = p.lnf_w, bias = p.lnf_b, eps = e)        # d × n
    return p.w_head * final                                                  # (vocab × d) * (d × n) = vocab × n
end
