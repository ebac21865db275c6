# A user's Julia port of GPT-2's decoder, written for these tests from ports/CONTRACT.md and the
# public description of nanoGPT's model.py (karpathy/nanoGPT: c_attn, a fused q/k/v projection
# split into heads; a causal masked_fill then softmax; c_fc -> gelu -> c_proj; pre-norm blocks;
# tok_emb + pos_emb; ln_f; lm_head; F.cross_entropy with ignore_index), NOT from our ports: it
# checks that someone else's formulation is judged without a false alarm (issue 18). Its choices
# differ from ours on purpose: q, k and v come from one vcat'ed 3d x d matrix; each head is a view;
# the causal mask is never materialised (each query's softmax runs over its own prefix of keys);
# the variance is sum(abs2, x .- mu) / d; the loss is a loop over columns. Generic over the float
# type T (Float64 here: these operations are judged at float64).
const attention_ports = (
    operations = ["layer_norm", "gelu", "feed_forward", "decoder_block", "gpt_forward", "lm_loss"],
)

# erf from the C library Julia ships (the standard library has none), in the caller's precision.
_erf(x::Float64) = ccall((:erf, Base.Math.libm), Float64, (Float64,), x)
_erf(x::Float32) = ccall((:erff, Base.Math.libm), Float32, (Float32,), x)
_erf(x::T) where {T<:AbstractFloat} = T(_erf(Float64(x)))

_eps(eps, ::Type{T}) where {T} = eps === nothing ? T(1e-5) : T(eps)

# x: d x n, one token per column; normalised over its d features (biased variance).
function layer_norm(x::AbstractMatrix{T}; weight = nothing, bias = nothing, eps = nothing) where {T<:AbstractFloat}
    d = size(x, 1)
    mu = sum(x; dims = 1) ./ d
    xc = x .- mu
    var = sum(abs2, xc; dims = 1) ./ d                  # two passes: centre first
    y = xc ./ sqrt.(var .+ _eps(eps, T))
    weight === nothing || (y = y .* weight)
    bias === nothing || (y = y .+ bias)
    return y
end

function _gelu_tanh(x::T) where {T<:AbstractFloat}
    c = sqrt(T(2) / T(pi))
    return x * (1 + tanh(c * (x + T(0.044715) * x^3))) / 2
end
_gelu_erf(x::T) where {T<:AbstractFloat} = x * (1 + _erf(x / sqrt(T(2)))) / 2

function gelu(x; approximate = "none")
    if approximate === nothing || approximate == "none"
        return map(_gelu_erf, x)
    elseif approximate == "tanh"
        return map(_gelu_tanh, x)
    end
    error("gelu: approximate must be \"none\" or \"tanh\", got $(repr(approximate))")
end

# nanoGPT's MLP: c_fc, gelu, c_proj (weights d_out x d_in, applied on the left).
function feed_forward(x, w_1, b_1, w_2, b_2; approximate = "none")
    hidden = gelu(w_1 * x .+ b_1; approximate = approximate)
    return w_2 * hidden .+ b_2
end

# Causal multi-head self-attention of a (d x n), nanoGPT style: one fused projection, split into
# q, k, v, then per head. Query j only ever looks at keys 1..j, so nothing is masked to -Inf.
function _causal_attention(a::AbstractMatrix{T}, p, num_heads::Integer) where {T<:AbstractFloat}
    d, n = size(a)
    d % num_heads == 0 || error("decoder_block: num_heads = $num_heads does not divide d = $d")
    hs = d ÷ num_heads
    c_attn_w = vcat(p.w_q, p.w_k, p.w_v)               # 3d x d
    c_attn_b = vcat(p.b_q, p.b_k, p.b_v)               # 3d
    qkv = c_attn_w * a .+ c_attn_b                      # 3d x n
    y = similar(qkv, d, n)
    inv_sqrt_hs = 1 / sqrt(T(hs))
    for h in 1:num_heads
        rows = ((h - 1) * hs + 1):(h * hs)
        q = view(qkv, rows, :)
        k = view(qkv, d .+ rows, :)
        v = view(qkv, 2d .+ rows, :)
        for j in 1:n
            att = (view(k, :, 1:j)' * view(q, :, j)) .* inv_sqrt_hs   # scores of keys 1..j
            att = exp.(att .- maximum(att))
            att ./= sum(att)
            y[rows, j] = view(v, :, 1:j) * att
        end
    end
    return p.w_o * y .+ p.b_o                           # c_proj
end

function decoder_block(x, params, num_heads; eps = nothing, approximate = "none")
    p = params
    h = x .+ _causal_attention(layer_norm(x; weight = p.ln1_w, bias = p.ln1_b, eps = eps), p, num_heads)
    a2 = layer_norm(h; weight = p.ln2_w, bias = p.ln2_b, eps = eps)
    return h .+ feed_forward(a2, p.w_1, p.b_1, p.w_2, p.b_2; approximate = approximate)
end

const _BLOCK_MATRICES = (:w_q, :w_k, :w_v, :w_o, :w_1, :w_2)
const _BLOCK_VECTORS = (:ln1_w, :ln1_b, :b_q, :b_k, :b_v, :b_o, :ln2_w, :ln2_b, :b_1, :b_2)

# Block b's parameters: slice b of every stacked array (the block axis is the last one).
function _block(params, b)
    mats = NamedTuple{_BLOCK_MATRICES}(Tuple(params[s][:, :, b] for s in _BLOCK_MATRICES))
    vecs = NamedTuple{_BLOCK_VECTORS}(Tuple(params[s][:, b] for s in _BLOCK_VECTORS))
    return merge(mats, vecs)
end

function gpt_forward(tokens, params, num_heads; eps = nothing, approximate = "none")
    n = length(tokens)
    n <= size(params.wpe, 2) || error("gpt_forward: $n tokens but only $(size(params.wpe, 2)) positions")
    x = params.wte[:, tokens] .+ params.wpe[:, 1:n]    # tok_emb + pos_emb
    for b in 1:size(params.w_q, 3)
        x = decoder_block(x, _block(params, b), num_heads; eps = eps, approximate = approximate)
    end
    return params.w_head * layer_norm(x; weight = params.lnf_w, bias = params.lnf_b, eps = eps)
end

# F.cross_entropy(logits, targets, ignore_index = ...), mean over the counted columns.
function lm_loss(logits::AbstractMatrix{T}, targets; ignore_index = nothing) where {T<:AbstractFloat}
    total = zero(T)
    count = 0
    for (i, t) in enumerate(targets)
        ignore_index !== nothing && t == ignore_index && continue
        col = view(logits, :, i)
        m = maximum(col)
        total += m + log(sum(exp.(col .- m))) - col[t]
        count += 1
    end
    return total / count                                # no counted column: 0/0 = NaN, as torch
end
