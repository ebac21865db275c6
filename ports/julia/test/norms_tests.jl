# Native tests of ports/julia/src/norms.jl (included by runtests.jl): per-column loops written
# independently of the vectorised port, feature-major (tokens are columns).

function naive_layer_norm(x, weight, bias, eps)
    y = similar(x)
    for j in 1:size(x, 2)
        c = x[:, j]
        m = sum(c) / length(c)
        v = sum((c .- m) .^ 2) / length(c)
        y[:, j] = (c .- m) ./ sqrt(v + eps) .* weight .+ bias
    end
    return y
end

@testset "layer_norm and rms_norm" begin
    rng = MersenneTwister(18)
    x = 3 .* randn(rng, 5, 3)                    # d = 5 features, n = 3 tokens
    w, b = randn(rng, 5), randn(rng, 5)
    @test layer_norm(x; weight = w, bias = b, eps = 1e-3) ≈ naive_layer_norm(x, w, b, 1e-3) rtol = 1e-13
    @test layer_norm(x) ≈ naive_layer_norm(x, ones(5), zeros(5), 1e-5) rtol = 1e-13
    @test layer_norm([2.0 -1.0; 2.0 -1.0; 2.0 -1.0]) == zeros(3, 2)       # constant columns: 0
    @test layer_norm([4.0 -2.0 7.0]; bias = [0.5]) == fill(0.5, 1, 3)      # d = 1: the bias
    near = reshape(1e6 .+ [-1.0, 0.0, 1.0, 2.0] .* 1e-2, 4, 1)             # mean/std ~ 1e8
    t = [-1.0, 0.0, 1.0, 2.0] .- 0.5
    @test vec(layer_norm(near; eps = 0)) ≈ t ./ sqrt(sum(t .^ 2) / 4) rtol = 1e-7
    @test eltype(layer_norm(Float32.(x))) == Float32                        # generic over the float type
    @test rms_norm([10.0 1.0; 10.0 2.0; 10.0 3.0; 10.0 4.0]; weight = [1.0, 2.0, 3.0, 4.0], eps = 0)[:, 1] ==
          [1.0, 2.0, 3.0, 4.0]
    @test rms_norm(reshape([1.0, 2.0, 3.0, 4.0], 4, 1))[:, 1] ≈ [1.0, 2.0, 3.0, 4.0] ./ sqrt(7.5 + 1e-5)
    @test_throws ArgumentError layer_norm(ones(3, 2); weight = [1.0, 2.0])
    @test_throws ArgumentError rms_norm(ones(3, 2); eps = -1)
end
