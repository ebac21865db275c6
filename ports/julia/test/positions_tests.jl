# Native tests of the position operations (ports/julia/src/positions.jl), included by runtests.jl
# after the port and its helpers (error_text, rng). Expected values come from per-element loops
# written from the definitions (Vaswani et al.; RoFormer's rotation of pairs 2i, 2i + 1), not
# from the port's complex-number formulation.

function naive_rope_interleaved(x, positions; base = 10000)
    d, n = size(x)
    out = copy(x)
    for j in 1:n, i in 0:(d ÷ 2 - 1)
        angle = positions[j] * base^(-2i / d)
        a, b = x[2i + 1, j], x[2i + 2, j]
        out[2i + 1, j] = a * cos(angle) - b * sin(angle)
        out[2i + 2, j] = b * cos(angle) + a * sin(angle)
    end
    return out
end

@testset "positions" begin
    @testset "sinusoidal_positions: d × n, sin in odd rows, cos in even rows, column 1 is position 0" begin
        pe = sinusoidal_positions(3, 4; base = 100)
        @test size(pe) == (4, 3)
        @test pe[:, 1] == [0, 1, 0, 1]
        @test pe[:, 3] ≈ [sin(2), cos(2), sin(0.2), cos(0.2)] atol = 1e-15
    end
    @testset "rotary_embedding pairs rows 2i+1 and 2i+2 (declared interleaved)" begin
        @test attention_ports.rope_pairing == "interleaved"
        x = randn(rng, 6, 5)
        @test rotary_embedding(x) ≈ naive_rope_interleaved(x, 0:4) atol = 1e-14
        @test rotary_embedding(x)[:, 1] == x[:, 1]   # position 0: no rotation
        pos = [4095.0, 7.0, 1200.0, 0.0, 3.0]
        y = rotary_embedding(x; positions = pos, base = 500000)
        @test y ≈ naive_rope_interleaved(x, pos; base = 500000) atol = 1e-13
        @test y[1, :] .^ 2 .+ y[2, :] .^ 2 ≈ x[1, :] .^ 2 .+ x[2, :] .^ 2   # a rotation keeps norms
    end
    @testset "generic over the float type" begin
        x32 = randn(rng, Float32, 4, 3)
        @test eltype(rotary_embedding(x32)) == Float32
        @test rotary_embedding(x32) ≈ Float32.(naive_rope_interleaved(Float64.(x32), 0:2)) atol = 1f-5
        @test eltype(sinusoidal_positions(2, 4; base = 10000f0)) == Float32
    end
    @testset "bad input throws an error naming the argument" begin
        @test occursin("size(x, 1)", error_text(() -> rotary_embedding(randn(3, 2))))
        @test occursin("positions", error_text(() -> rotary_embedding(randn(2, 2); positions = [1.0, 2.0, 3.0])))
        @test occursin("base", error_text(() -> sinusoidal_positions(2, 4; base = -1)))
    end
end
