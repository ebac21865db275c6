# Native tests of ports/julia/src/activations.jl (included by runtests.jl).

@testset "gelu" begin
    x = [0.0 1e-9 1.0 -1.0; 10.0 -10.0 40.0 -40.0]
    y = gelu(x)
    @test y[1, :] ≈ [0.0, 5e-10, 0.8413447460685429, -0.15865525393145707] rtol = 1e-14
    @test y[2, 1] == 10.0 && abs(y[2, 2]) < 1e-20
    t = collect(-4.0:0.5:4.0)'
    a = sqrt(2 / pi) .* (t .+ 0.044715 .* t .^ 3)
    @test gelu(t; approximate = "tanh") ≈ 0.5 .* t .* (1 .+ tanh.(a)) rtol = 1e-15
    @test 1e-5 < maximum(abs.(gelu(t; approximate = "tanh") .- gelu(t))) < 1e-3
    @test eltype(gelu(Float32.(t))) == Float32
    @test_throws ArgumentError gelu(ones(1, 1); approximate = "erf")
end
