# Native tests of ports/julia/src/optim.jl (included by runtests.jl): a per-element loop written
# independently of the broadcast port, Adam's known first step, and the contract's properties.

function naive_adamw(p, g, m, v, t, lr, b1, b2, eps, wd)
    P, M, V = copy(p), copy(m), copy(v)
    for i in eachindex(p)
        M[i] = b1 * m[i] + (1 - b1) * g[i]
        V[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
        P[i] = p[i] - lr * wd * p[i] - lr * (M[i] / (1 - b1^t)) / (sqrt(V[i] / (1 - b2^t)) + eps)
    end
    return P, M, V
end

@testset "adamw_step" begin
    rng = MersenneTwister(18)
    p, g, m = randn(rng, 4, 3), randn(rng, 4, 3), 0.1 .* randn(rng, 4, 3)
    v = 0.01 .* rand(rng, 4, 3)
    r = adamw_step(p, g, m, v, 7; lr = 0.01, beta1 = 0.8, weight_decay = 0.1)
    @test keys(r) == (:param, :m, :v) && size(r.param) == (4, 3)
    P, M, V = naive_adamw(p, g, m, v, 7, 0.01, 0.8, 0.999, 1e-8, 0.1)
    @test r.param ≈ P rtol = 1e-13
    @test r.m ≈ M rtol = 1e-13
    @test r.v ≈ V rtol = 1e-13
    rv = adamw_step(p[:, 1], g[:, 1], m[:, 1], v[:, 1], 1000)                  # a vector, a late step
    @test rv.param ≈ naive_adamw(p[:, 1], g[:, 1], m[:, 1], v[:, 1], 1000, 1e-3, 0.9, 0.999, 1e-8, 0.01)[1] rtol = 1e-13
    g1 = [3.0, -2e-3, 5e-6]                                                     # the first step from zero moments
    r1 = adamw_step(zeros(3), g1, zeros(3), zeros(3), 1; lr = 0.1, weight_decay = 0)
    @test r1.param ≈ -0.1 .* g1 ./ (abs.(g1) .+ 1e-8) rtol = 1e-12
    @test adamw_step([2.0, -4.0], zeros(2), zeros(2), zeros(2), 3; lr = 0.5, weight_decay = 0.1).param ==
          [2.0, -4.0] .* (1 - 0.05)                                             # decoupled: only shrinks
    r32 = adamw_step(Float32.(p), Float32.(g), Float32.(m), Float32.(v), 2)
    @test eltype(r32.param) == Float32 && eltype(r32.v) == Float32              # generic over the float type
    @test_throws ArgumentError adamw_step(ones(2, 2), ones(2, 3), zeros(2, 2), zeros(2, 2), 1)
    @test_throws ArgumentError adamw_step([1.0], [1.0], [0.0], [0.0], 0)
    @test_throws ArgumentError adamw_step([1.0], [1.0], [0.0], [-1.0], 1)
end
