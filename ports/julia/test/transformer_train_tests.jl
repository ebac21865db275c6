# Native tests of ports/julia/src/transformer_train.jl (included by runtests.jl after
# transformer_tests.jl, whose random_gpt it uses): two steps against Adam written out element by
# element (the first step's m_hat / sqrt(v_hat) is g / |g|; the second's carries the first's
# moments and corrects by 1 - beta^2), each loss the one before its step, bad steps.

@testset "gpt_train" begin
    rng = MersenneTwister(1803)
    params, _ = random_gpt(rng, 4, 6, 1, 5, 4)
    tokens, targets, H = [2, 4, 2], [4, 2, 5], 2
    lr, wd = 0.01, 0.1
    r = gpt_train(tokens, targets, params, H, 2; lr = lr, weight_decay = wd)
    @test keys(r) == (:losses, :params)
    first = gpt_grads(tokens, targets, params, H)
    p1 = map((p, g) -> p .* (1 - lr * wd) .- lr .* g ./ (abs.(g) .+ 1e-8), params, first.grads)  # m_hat = g, v_hat = g^2
    second = gpt_grads(tokens, targets, p1, H)
    @test r.losses ≈ [first.loss, second.loss] rtol = 1e-12
    # grads.b_k is exactly 0 (the softmax ignores the key bias) and computed as rounding noise, which
    # Adam divides by eps: b_k moves by lr times noise / 1e-8 from run to run, nothing else does
    @test maximum(abs.(r.params.b_k .- params.b_k .* (1 - lr * wd)^2)) < 1e-6
    for name in filter(!=(:b_k), collect(keys(params)))
        g1, g2 = first.grads[name], second.grads[name]
        m_hat = (0.9 * 0.1 .* g1 .+ 0.1 .* g2) ./ (1 - 0.9^2)
        v_hat = (0.999 * 0.001 .* g1 .^ 2 .+ 0.001 .* g2 .^ 2) ./ (1 - 0.999^2)
        @test r.params[name] ≈ p1[name] .* (1 - lr * wd) .- lr .* m_hat ./ (sqrt.(v_hat) .+ 1e-8) rtol = 1e-12
    end
    @test_throws ArgumentError gpt_train(tokens, targets, params, H, 0)
    @test_throws ArgumentError gpt_train(tokens, targets, params, H, 1.5)
end
