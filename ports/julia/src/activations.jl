# Activation functions in Julia: gelu, elementwise, feature-major like attention.jl (x is d x n).
# approximate = "none" (the default) is 0.5 x (1 + erf(x / sqrt(2))); the standard library has no
# erf, so it comes from the C math library Julia itself ships (Base.Math.libm, openlibm: erf and
# erff). approximate = "tanh" is GPT-2's 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
# Generic over the float type: Float32 in, Float32 out.

_erf(x::Float64) = ccall((:erf, Base.Math.libm), Float64, (Float64,), x)
_erf(x::Float32) = ccall((:erff, Base.Math.libm), Float32, (Float32,), x)
# libm has no half-precision erf: Float32's, rounded once (as Julia's own Float16 exp and tanh are)
_erf(x::Float16) = Float16(_erf(Float32(x)))

"""
    gelu(x; approximate = "none")

`x` is d × n (any matrix: elementwise). `approximate` is `"none"` (erf) or `"tanh"`.
"""
function gelu(x::AbstractMatrix{T}; approximate = "none") where {T<:AbstractFloat}
    all(isfinite, x) || throw(ArgumentError("gelu: x ($(_size_str(x))) must be finite"))
    form = approximate === nothing ? "none" : approximate
    form in ("none", "tanh") || throw(ArgumentError("gelu: approximate must be \"none\" or \"tanh\"; got $approximate"))
    if form == "tanh"
        k = sqrt(T(2) / T(pi))
        inner = k .* (x .+ T(0.044715) .* x .^ 3)   # d × n
        return T(0.5) .* x .* (1 .+ tanh.(inner))
    end
    return T(0.5) .* x .* (1 .+ _erf.(x ./ sqrt(T(2))))
end
gelu(x::AbstractMatrix{<:Integer}; kw...) = gelu(float(x); kw...)
