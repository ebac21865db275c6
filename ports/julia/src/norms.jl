# Normalisation layers in Julia: layer_norm and rms_norm, feature-major like attention.jl: a token
# is a column, so x is d x n and each column is normalised over its d features. weight (gain) and
# bias are vectors of length d (or nothing). eps is added inside the square root; the variance is
# the biased one (divided by d), as torch.nn.functional.layer_norm. Generic over the float type:
# Float32 in, Float32 out (eps converted once).

function _check_norm(fn, x::AbstractMatrix, vecs...)
    d = size(x, 1)
    d >= 1 && size(x, 2) >= 1 || throw(ArgumentError("$fn: x must be d×n with d, n ≥ 1; got $(_size_str(x))"))
    all(isfinite, x) || throw(ArgumentError("$fn: x ($(_size_str(x))) must be finite"))
    for (name, v) in vecs
        v === nothing && continue
        (v isa AbstractVector && length(v) == d) ||
            throw(ArgumentError("$fn: $name must be a vector of length d = $d (x is $(_size_str(x)), d×n); " *
                                "got $(_size_str(v))"))
    end
    return d
end

function _check_eps(fn, eps)
    (eps isa Real && isfinite(eps) && eps >= 0) ||
        throw(ArgumentError("$fn: eps must be a finite number ≥ 0; got $eps"))
    return eps
end

"""
    layer_norm(x; weight = nothing, bias = nothing, eps = 1e-5)

`x` is d × n (one token per column). Returns `(x .- mean) ./ sqrt.(var .+ eps) .* weight .+ bias`,
mean and biased variance over each column, the variance in two passes.
"""
function layer_norm(x::AbstractMatrix{T}; weight = nothing, bias = nothing, eps = 1e-5) where {T<:AbstractFloat}
    d = _check_norm("layer_norm", x, ("weight", weight), ("bias", bias))
    e = T(_check_eps("layer_norm", eps))
    mu = sum(x; dims = 1) ./ d                      # 1 × n: each token's mean
    centred = x .- mu                               # d × n
    variance = sum(abs2, centred; dims = 1) ./ d    # 1 × n: biased, two passes
    y = centred ./ sqrt.(variance .+ e)             # d × n
    weight === nothing || (y = y .* weight)         # layer_norm gain, down each column
    bias === nothing || (y = y .+ bias)             # layer_norm shift
    return y
end
layer_norm(x::AbstractMatrix{<:Integer}; kw...) = layer_norm(float(x); kw...)

"""
    rms_norm(x; weight = nothing, eps = 1e-5)

`x` is d × n. Returns `x ./ sqrt.(mean(x.^2) .+ eps) .* weight` per column (no centring, no bias).
"""
function rms_norm(x::AbstractMatrix{T}; weight = nothing, eps = 1e-5) where {T<:AbstractFloat}
    d = _check_norm("rms_norm", x, ("weight", weight))
    e = T(_check_eps("rms_norm", eps))
    mean_square = sum(abs2, x; dims = 1) ./ d       # 1 × n
    y = x ./ sqrt.(mean_square .+ e)                # d × n
    weight === nothing || (y = y .* weight)         # rms_norm gain
    return y
end
rms_norm(x::AbstractMatrix{<:Integer}; kw...) = rms_norm(float(x); kw...)
