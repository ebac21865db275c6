# Native tests of ports/julia/src/losses.jl (included by runtests.jl).

function naive_lm_loss(logits, targets; ignore = nothing)
    total, count = 0.0, 0
    for j in 1:size(logits, 2)
        targets[j] == ignore && continue
        z = logits[:, j]
        total += log(sum(exp(x - maximum(z)) for x in z)) + maximum(z) - z[targets[j]]
        count += 1
    end
    return total / count
end

@testset "lm_loss" begin
    logits = randn(rng, 7, 5)                                  # vocab 7 × 5 positions
    targets = [1, 7, 3, 3, 5]
    @test lm_loss(logits, targets) ≈ naive_lm_loss(logits, targets) rtol = 1e-14
    @test lm_loss(zeros(7, 3), [2, 4, 6]) ≈ log(7) rtol = 1e-15   # uniform: log(vocab) each
    @test lm_loss(reshape([1.0, 2.0, 3.0], 3, 1), [2]) ≈ -log(exp(2) / sum(exp.([1.0, 2.0, 3.0])))
    # ignored positions count neither in the sum nor in the denominator
    l = [0.0 2.0 5.0; 1.0 0.0 5.0; 2.0 1.0 5.0]                  # 3 positions (columns)
    @test lm_loss(l, [3, 1, 1]; ignore_index = 1) ≈ naive_lm_loss(l[:, 1:1], [3])
    @test lm_loss(l, [3, 0, 0]; ignore_index = 0) ≈ naive_lm_loss(l[:, 1:1], [3])
    @test isnan(lm_loss(l, [0, 0, 0]; ignore_index = 0))        # nothing counted: 0 / 0
    # stable for logits of ±1000, and a target whose probability underflows
    big = [1000.0 -1000.0; 999.0 -1001.0; 998.0 -1002.0]
    # lse = 1000 + log(...) rounds at 1000: ~1e-13 absolute, whatever the loss's own size
    @test lm_loss(big, [1, 1]) ≈ log(1 + exp(-1) + exp(-2)) atol = 1e-12
    @test lm_loss(reshape([0.0, -800.0], 2, 1), [2]) ≈ 800 rtol = 1e-15
    @test lm_loss(Float32.(logits), targets) isa Float32
    @test occursin("targets[2] = 4 is neither a token id in 1:3", error_text(() -> lm_loss(zeros(3, 2), [1, 4])))
    @test occursin("targets must be 2 integer", error_text(() -> lm_loss(zeros(3, 2), [1, 2, 3])))
    @test_throws ArgumentError lm_loss(zeros(3, 2), [1, 2]; ignore_index = 1.5)
end
