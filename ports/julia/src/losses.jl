# Losses in Julia: lm_loss, the next-token cross-entropy, feature-major like attention.jl: logits
# is vocab × n, one column of next-token logits per position (as Flux's logitcrossentropy), and
# targets holds n token ids, 1-based. A position whose target equals ignore_index (an id in the same
# base: a padding token's, or 0 for "one below the first") is not counted; nothing: every position
# counts. The loss is the mean over the counted positions of logsumexp(logits[:, j]) -
# logits[targets[j], j], as torch's cross_entropy; with no position counted, 0 / 0 = NaN (torch's).
# Generic over the float type: Float32 in, Float32 out.

function _check_loss_ids(fn, name, ids, len)
    ok = length(ids) == len && all(t -> t isa Real && isfinite(t) && isinteger(t), ids)
    ok || throw(ArgumentError("$fn: $name must be $len integer token id(s); got $(repr(ids))"))
    return ids
end

"""
    lm_loss(logits, targets; ignore_index = nothing)

`logits` is vocab × n (one position per column), `targets` a vector of n 1-based token ids.
Returns the mean over the positions whose target is not `ignore_index` of
`logsumexp(logits[:, j]) - logits[targets[j], j]` (NaN when none is counted).
"""
function lm_loss(logits::AbstractMatrix{T}, targets::AbstractVector; ignore_index = nothing) where {T<:AbstractFloat}
    vocab, n = size(logits)
    all(isfinite, logits) || throw(ArgumentError("lm_loss: logits ($(_size_str(logits)), vocab×n) must be finite"))
    _check_loss_ids("lm_loss", "targets", targets, n)
    ignore_index === nothing || _check_loss_ids("lm_loss", "ignore_index", [ignore_index], 1)
    counted = ignore_index === nothing ? trues(n) : targets .!= ignore_index
    for j in 1:n
        counted[j] && !(1 <= targets[j] <= vocab) &&
            throw(ArgumentError("lm_loss: targets[$j] = $(targets[j]) is neither a token id in 1:$vocab " *
                                "nor ignore_index ($(repr(ignore_index)))"))
    end
    cols = findall(counted)
    z = logits[:, cols]                                          # vocab × c: the counted positions
    peak = maximum(z; dims = 1)                                  # 1 × c
    lse = vec(peak .+ log.(sum(exp.(z .- peak); dims = 1)))      # c: stable log-sum-exp
    picked = T[z[Int(targets[col]), k] for (k, col) in enumerate(cols)]   # each target's logit
    return sum(lse .- picked) / T(length(cols))                  # nothing counted: 0 / 0 = NaN
end
lm_loss(logits::AbstractMatrix{<:Integer}, targets::AbstractVector; kw...) = lm_loss(float(logits), targets; kw...)
