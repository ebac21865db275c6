# Optimizers in Julia: adamw_step, one step of torch.optim.AdamW, elementwise on one parameter
# array of any shape (the layout does not matter: every array has the same one). m and v are the
# moments before the step; step is the step's number t >= 1 (a count, not an index). Decoupled
# weight decay (applied to the parameter, first, as torch), bias-corrected moments; plain Adam is
# weight_decay = 0. Generic over the float type: Float32 in, Float32 out (the scalars converted once).

function _check_adamw(param, grad, m, v, step, scalars)
    sizes = "param $(_size_str(param)), grad $(_size_str(grad)), m $(_size_str(m)), v $(_size_str(v))"
    size(grad) == size(m) == size(v) == size(param) && length(param) >= 1 ||
        throw(ArgumentError("adamw_step: param, grad, m and v must have one non-empty shape; got $sizes"))
    for (name, a) in (("param", param), ("grad", grad), ("m", m), ("v", v))
        all(isfinite, a) || throw(ArgumentError("adamw_step: $name ($(_size_str(a))) must be finite"))
    end
    all(x -> x >= 0, v) || throw(ArgumentError("adamw_step: v (the second moment, a mean of squares) must be ≥ 0"))
    (step isa Real && isfinite(step) && step >= 1 && isinteger(step)) ||
        throw(ArgumentError("adamw_step: step must be an integer ≥ 1 (the step's number, a count); got $step"))
    for (name, s) in pairs(scalars)
        (s isa Real && isfinite(s) && s >= 0) ||
            throw(ArgumentError("adamw_step: $name must be a finite number ≥ 0; got $s"))
    end
    scalars.beta1 < 1 && scalars.beta2 < 1 || throw(ArgumentError("adamw_step: beta1 and beta2 must be below 1"))
    return Int(step)
end

"""
    adamw_step(param, grad, m, v, step; lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01)

One AdamW step. Returns `(param = ..., m = ..., v = ...)`, each of `param`'s shape.
"""
function adamw_step(param::AbstractArray{T}, grad::AbstractArray, m::AbstractArray, v::AbstractArray, step;
                    lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01) where {T<:AbstractFloat}
    t = _check_adamw(param, grad, m, v, step, (lr = lr, beta1 = beta1, beta2 = beta2, eps = eps,
                                                weight_decay = weight_decay))
    # The scalars are formed in the keywords' own precision, then converted to T, as torch and Flux
    # do: from the default beta2 = 0.999 (a Float64), 1 - beta2 is 1e-3 to Float32's precision,
    # while 1 - Float32(0.999) is 1.3e-5 away from it relatively (1 - beta amplifies beta's rounding).
    η, ϵ = T(lr), T(eps)
    g = T.(grad)
    decayed = param .* T(1 - lr * weight_decay)     # decoupled weight decay, on the parameter
    m_new = T(beta1) .* T.(m) .+ T(1 - beta1) .* g  # first moment
    v_new = T(beta2) .* T.(v) .+ T(1 - beta2) .* g .^ 2  # second moment
    correction1 = T(1 - beta1^t)                    # bias corrections (t counts from 1)
    correction2 = T(1 - beta2^t)
    m_hat = m_new ./ correction1
    v_hat = v_new ./ correction2
    return (param = decayed .- η .* m_hat ./ (sqrt.(v_hat) .+ ϵ), m = m_new, v = v_new)
end
adamw_step(param::AbstractArray{<:Integer}, args...; kw...) = adamw_step(float(param), args...; kw...)
