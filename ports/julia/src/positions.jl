# Position operations in Julia, feature-major (ports/CONTRACT.md, Julia section): a token is a
# column, so x is d × n and the sinusoidal table is d × n. Positions are position values, 0 for
# the first token (not 1-based indices): token p and frequency i = 0 .. d/2 - 1 have the angle
# p * θ_i, θ_i = base^(-2i/d). Generic over the float type T of x (Float64, Float32).
#
# This port's rotary embedding pairs features 2i and 2i + 1 (in Julia's 1-based rows: 2i - 1 and
# 2i), the "interleaved" pairing of GPT-J, RoFormer and Meta's Llama, written as they write it:
# each pair is one complex number, rotated by multiplying with cis(p θ_i). It is not the
# contract's default (halves), so the port declares it. Standard library only, Julia 1.5 to 1.11.

const attention_ports = (rope_pairing = "interleaved",)

function _check_even_width(d, what, fn)
    (d >= 2 && iseven(d)) ||
        throw(ArgumentError("$fn: $what must be even and at least 2 (features are rotated in pairs); got $d"))
end

function _check_base(base, fn)
    (isfinite(base) && base > 0) || throw(ArgumentError("$fn: base must be a finite positive number; got $base"))
end

# θ_i = base^(-2i/d), i = 0 .. d/2 - 1, in T
_inverse_frequencies(::Type{T}, d, base) where {T} = [inv(T(base)^(T(2i) / T(d))) for i in 0:(d ÷ 2 - 1)]

"""
    sinusoidal_positions(n, d; base = 10000)

The d × n table of Vaswani et al.: column p + 1 holds position p, with sin(p θ_i) in row 2i + 1
and cos(p θ_i) in row 2i + 2.
"""
function sinusoidal_positions(n::Integer, d::Integer; base::Real = 10000)
    n >= 1 || throw(ArgumentError("sinusoidal_positions: n (the number of positions) must be positive; got $n"))
    _check_even_width(d, "d", "sinusoidal_positions")
    _check_base(base, "sinusoidal_positions")
    T = float(typeof(base))
    θ = _inverse_frequencies(T, d, base)
    angles = θ .* T.(0:(n - 1))'          # d/2 × n
    pe = Matrix{T}(undef, d, n)
    pe[1:2:end, :] .= sin.(angles)
    pe[2:2:end, :] .= cos.(angles)
    return pe
end

"""
    rotary_embedding(x; positions = nothing, base = 10000)

RoPE on `x` (d × n, d even): the features (2i + 1, 2i + 2) of token column j, as the complex
number x[2i+1, j] + im x[2i+2, j], are multiplied by cis(p_j θ_i). `positions` (length n)
defaults to 0 .. n - 1.
"""
function rotary_embedding(x::AbstractMatrix{T}; positions = nothing, base::Real = 10000) where {T<:AbstractFloat}
    d, n = size(x)
    _check_even_width(d, "size(x, 1) (the number of features)", "rotary_embedding")
    _check_base(base, "rotary_embedding")
    all(isfinite, x) || throw(ArgumentError("rotary_embedding: x ($(_size_str(x))) must be finite"))
    p = positions === nothing ? T.(0:(n - 1)) : T.(vec(positions))
    length(p) == n || throw(ArgumentError(
        "rotary_embedding: positions must hold one value per token (column) of x, $n; got $(length(p))"))
    angles = _inverse_frequencies(T, d, base) .* p'            # d/2 × n
    pairs = reinterpret(Complex{T}, Matrix{T}(x))               # d/2 × n: rows 2i+1, 2i+2 as one number
    return Matrix{T}(reinterpret(T, pairs .* cis.(angles)))     # d × n
end
