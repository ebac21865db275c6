# Every parameter's gradient of a GPT's next-token loss in Julia (ports/CONTRACT.md, "gpt_grads"):
# the loss of lm_loss(gpt_forward(tokens), targets) and its hand-written backward, as llm.c's
# gpt2_backward, feature-major like transformer.jl (a token is a column, weights d_out × d_in
# applied as W * x .+ b, logits vocab × n, the blocks stacked along a last axis).
#
# The forward below is gpt_forward's wiring again, written out so that it keeps what the backward
# needs: each block's input, its normalised input a, q, k and v, the heads' concatenated output,
# the residual h, the second norm's output m, the feed-forward's pre-activation u and its gelu.
# Each layer norm's backward starts from that norm's input (its mean and inverse standard
# deviation are recomputed there, a d-sum per token); each head's attention weights are recomputed
# from the cached q and k with the causal mask, as FlashAttention's backward does, so a block keeps
# O(n d) numbers instead of the n × n × H weights. Generic over the float type T of the parameters.

# d logits of the mean next-token cross-entropy: (softmax(logits[:, j]) - onehot(targets[j])) / count
# for every counted position j, zero for an ignored one (vocab × n).
function _lm_loss_backward(logits::AbstractMatrix{T}, targets::AbstractVector, ignore_index) where {T<:AbstractFloat}
    counted = ignore_index === nothing ? trues(length(targets)) : targets .!= ignore_index
    d_logits = softmax(logits)                                   # vocab × n: each column sums to 1
    for j in eachindex(targets)
        counted[j] ? (d_logits[Int(targets[j]), j] -= 1) : (d_logits[:, j] .= 0)
    end
    return d_logits ./ T(count(counted))                         # the mean: 1 / count each
end

# layer_norm(x; weight = w, bias, eps)'s backward for the upstream gradient dy (d × n): returns
# (dx, dw, db). With x̂ = (x - μ) r, r = 1 / sqrt(var + eps) per column and g = dy .* w,
# dx = r (g - mean(g) - x̂ mean(g x̂)) (the mean term: μ depends on every feature of its column).
function _layer_norm_backward(x::AbstractMatrix{T}, w::AbstractVector, eps, dy::AbstractMatrix{T}) where {T<:AbstractFloat}
    d = size(x, 1)
    centred = x .- sum(x; dims = 1) ./ d                         # d × n
    r = 1 ./ sqrt.(sum(abs2, centred; dims = 1) ./ d .+ T(eps))  # 1 × n: inverse standard deviation
    xhat = centred .* r                                          # d × n
    g = dy .* w                                                  # d × n: through the gain
    dx = r .* (g .- sum(g; dims = 1) ./ d .- xhat .* (sum(g .* xhat; dims = 1) ./ d))
    return dx, vec(sum(dy .* xhat; dims = 2)), vec(sum(dy; dims = 2))
end

# gelu'(u), elementwise, of the form gelu's `approximate` names: the erf form's Φ(u) + u φ(u), the
# tanh form's 0.5 (1 + t) + 0.5 u (1 - t^2) k (1 + 3 c u^2), t = tanh(k (u + c u^3)).
function _gelu_derivative(u::AbstractMatrix{T}, approximate) where {T<:AbstractFloat}
    if (approximate === nothing ? "none" : approximate) == "tanh"
        k, c = sqrt(T(2) / T(pi)), T(0.044715)
        t = tanh.(k .* (u .+ c .* u .^ 3))
        return T(0.5) .* (1 .+ t) .+ T(0.5) .* u .* (1 .- t .^ 2) .* k .* (1 .+ 3c .* u .^ 2)
    end
    return T(0.5) .* (1 .+ _erf.(u ./ sqrt(T(2)))) .+ u .* exp.(-u .^ 2 ./ 2) ./ sqrt(2 * T(pi))
end

# The causal multi-head attention's backward from d_att (d × n, the heads' concatenated output's
# gradient) to (dq, dk, dv), each d × n. Per head, the weights A (keys × queries) are recomputed
# from q and k with the causal mask; then dA = v' d_out, the softmax's Jacobian per query column
# dS = A .* (dA .- sum(dA .* A)), and dq = s k dS, dk = s q dS', dv = d_out A' (s = 1/sqrt(d_head)).
function _causal_attention_backward(q::AbstractMatrix{T}, k, v, d_att, num_heads::Int) where {T<:AbstractFloat}
    d, n = size(q)
    d_head = d ÷ num_heads
    s = inv(sqrt(T(d_head)))
    mask = _causal_mask(T, n)                                    # n × n (keys × queries)
    dq, dk, dv = similar(q), similar(k), similar(v)
    for h in 1:num_heads
        rows = ((h - 1) * d_head + 1):(h * d_head)
        qh, kh, vh, d_out = q[rows, :], k[rows, :], v[rows, :], d_att[rows, :]
        weights = scaled_dot_product_attention(qh, kh, vh; mask = mask).weights  # n × n
        d_weights = vh' * d_out                                  # (n × d_head) * (d_head × n)
        d_scores = weights .* (d_weights .- sum(d_weights .* weights; dims = 1))
        dq[rows, :] = (kh * d_scores) .* s                       # d_head × n
        dk[rows, :] = (qh * d_scores') .* s                      # d_head × n
        dv[rows, :] = d_out * weights'                           # d_head × n
    end
    return dq, dk, dv
end

# One block's forward on checked parameters p (block b's slices), keeping what its backward reads.
function _block_forward_cached(x::AbstractMatrix{T}, p, num_heads::Int, eps, approximate) where {T<:AbstractFloat}
    d, n = size(x)
    d_head = d ÷ num_heads
    a = layer_norm(x; weight = p.ln1_w, bias = p.ln1_b, eps = eps)           # d × n
    q, k, v = _project(a, p.w_q, p.b_q, "q"), _project(a, p.w_k, p.b_k, "k"), _project(a, p.w_v, p.b_v, "v")
    mask = _causal_mask(T, n)
    att = reduce(vcat, map(1:num_heads) do h
        rows = ((h - 1) * d_head + 1):(h * d_head)
        scaled_dot_product_attention(q[rows, :], k[rows, :], v[rows, :]; mask = mask).output
    end)                                                                      # d × n: the heads in order
    h = x .+ _project(att, p.w_o, p.b_o, "o")                                 # first residual
    m = layer_norm(h; weight = p.ln2_w, bias = p.ln2_b, eps = eps)           # d × n
    u = _project(m, p.w_1, p.b_1, "1")                                        # d_ff × n
    act = gelu(u; approximate = approximate)                                  # d_ff × n
    y = h .+ _project(act, p.w_2, p.b_2, "2")                                 # second residual
    return y, (x = x, a = a, q = q, k = k, v = v, att = att, h = h, m = m, u = u, act = act)
end

# W * x .+ b's parameter gradients from the output's dy (d_out × n) and the input x (d_in × n).
_linear_grads(dy, x) = (dy * x', vec(sum(dy; dims = 2)))

# One block's backward: from dy (d × n) and the block's cache c to dx, writing its parameter
# gradients into slice b of the stacked gradients g.
function _block_backward!(g, b::Int, dy::AbstractMatrix{T}, c, p, num_heads::Int, eps, approximate) where {T<:AbstractFloat}
    store!(name, value) = (selectdim(g[name], ndims(g[name]), b) .= value)
    # y = h + W_2 gelu(u) + b_2, u = W_1 m + b_1, m = layer_norm(h)
    w_2, b_2 = _linear_grads(dy, c.act)
    store!(:w_2, w_2); store!(:b_2, b_2)
    du = (p.w_2' * dy) .* _gelu_derivative(c.u, approximate)                 # d_ff × n
    w_1, b_1 = _linear_grads(du, c.m)
    store!(:w_1, w_1); store!(:b_1, b_1)
    dh_norm, ln2_w, ln2_b = _layer_norm_backward(c.h, p.ln2_w, eps, p.w_1' * du)
    store!(:ln2_w, ln2_w); store!(:ln2_b, ln2_b)
    dh = dy .+ dh_norm                                                        # both paths into h
    # h = x + W_o att + b_o, att from q, k, v = W a + b, a = layer_norm(x)
    w_o, b_o = _linear_grads(dh, c.att)
    store!(:w_o, w_o); store!(:b_o, b_o)
    dq, dk, dv = _causal_attention_backward(c.q, c.k, c.v, p.w_o' * dh, num_heads)
    for (name_w, name_b, dz) in ((:w_q, :b_q, dq), (:w_k, :b_k, dk), (:w_v, :b_v, dv))
        w, bias = _linear_grads(dz, c.a)
        store!(name_w, w); store!(name_b, bias)
    end
    da = p.w_q' * dq .+ p.w_k' * dk .+ p.w_v' * dv                           # d × n
    dx_norm, ln1_w, ln1_b = _layer_norm_backward(c.x, p.ln1_w, eps, da)
    store!(:ln1_w, ln1_w); store!(:ln1_b, ln1_b)
    return dh .+ dx_norm                                                      # residual + through the norm
end

"""
    gpt_grads(tokens, targets, params, num_heads; ignore_index = nothing, eps = nothing, approximate = "none")

The loss `lm_loss(gpt_forward(tokens, params, num_heads; eps, approximate), targets; ignore_index)`
and its gradient for every member of `params` (as `gpt_forward` takes them: `wte` d × vocab, `wpe`
d × n_ctx, the blocks' stacked along a last axis, `lnf_w`, `lnf_b`, `w_head` vocab × d). `tokens`
and `targets` hold n 1-based token ids. Returns `(loss, grads)`, `grads` a NamedTuple shaped as
`params`: a token that does not occur has a zero column of `grads.wte`, a position past n a zero
column of `grads.wpe`.
"""
function gpt_grads(tokens::AbstractVector{<:Real}, targets::AbstractVector, params, num_heads;
                   ignore_index = nothing, eps = nothing, approximate = "none")
    c = _check_gpt(tokens, params, num_heads, eps, "gpt_grads")
    p, tok, n_layer, heads, e = c.p, c.tokens, c.n_layer, c.heads, c.eps
    n = length(tok)
    T = float(eltype(p.wte))
    block(b) = map(a -> selectdim(a, ndims(a), b), NamedTuple{DECODER_BLOCK_PARAMS}(p))  # block b's slices

    # forward, keeping each block's cache
    x = p.wte[:, tok] .+ p.wpe[:, 1:n]                                        # d × n
    caches = Vector{Any}(undef, n_layer)
    for b in 1:n_layer
        x, caches[b] = _block_forward_cached(x, block(b), heads, e, approximate)
    end
    final = layer_norm(x; weight = p.lnf_w, bias = p.lnf_b, eps = e)         # d × n
    logits = p.w_head * final                                                 # vocab × n
    loss = lm_loss(logits, targets; ignore_index = ignore_index)              # checks the targets

    # backward
    g = map(a -> zeros(T, size(a)), p)                                        # every gradient, shaped as params
    d_logits = _lm_loss_backward(logits, targets, ignore_index)               # vocab × n
    g.w_head .= d_logits * final'                                             # vocab × d
    dx, lnf_w, lnf_b = _layer_norm_backward(x, p.lnf_w, e, p.w_head' * d_logits)
    g.lnf_w .= lnf_w
    g.lnf_b .= lnf_b
    for b in n_layer:-1:1
        dx = _block_backward!(g, b, dx, caches[b], block(b), heads, e, approximate)
    end
    for j in 1:n                                                              # a repeated token accumulates
        g.wte[:, tok[j]] .+= dx[:, j]
    end
    g.wpe[:, 1:n] .= dx                                                       # positions past n stay zero
    return (loss = loss, grads = g)
end
