# Native tests of ports/julia/src/transformer_grads.jl (included by runtests.jl after
# transformer_tests.jl, whose random_gpt it uses): the gradient against central finite differences
# of the port's own lm_loss(gpt_forward(...)) on a tiny model, every option once, the shapes, the
# embedding rows of absent tokens and unused positions, Float32 in and out. A few hundred tiny
# forwards: seconds.

# d loss / d params[name][i] by central differences of the port's forward and loss
function finite_difference(tokens, targets, params, heads, name, i; ignore_index = nothing, h = 1e-6, kw...)
    loss_at(delta) = begin
        a = copy(params[name])
        a[i] += delta
        logits = gpt_forward(tokens, merge(params, NamedTuple{(name,)}((a,))), heads; kw...)
        lm_loss(logits, targets; ignore_index = ignore_index)
    end
    return (loss_at(h) - loss_at(-h)) / (2h)
end

@testset "gpt_grads" begin
    rng = MersenneTwister(1802)
    d, d_ff, n_layer, vocab, n_ctx, H = 4, 6, 2, 6, 6, 2
    params, _ = random_gpt(rng, d, d_ff, n_layer, vocab, n_ctx)
    tokens = [2, 5, 2, 3]                                  # token 2 twice; 1, 4 and 6 absent; n = 4 < n_ctx
    targets = [5, 2, 3, 1]

    @testset "loss and shapes" begin
        r = gpt_grads(tokens, targets, params, H)
        @test keys(r) == (:loss, :grads)
        @test r.loss == lm_loss(gpt_forward(tokens, params, H), targets)   # the same forward, bit for bit
        @test keys(r.grads) == GPT_PARAMS
        @test all(size(r.grads[name]) == size(params[name]) for name in GPT_PARAMS)
        @test all(iszero, r.grads.wte[:, [1, 4, 6]])       # tokens that never occur
        @test all(!iszero, r.grads.wte[:, [2, 3, 5]])
        @test all(iszero, r.grads.wpe[:, 5:end])           # positions past n
    end

    # every element of every parameter against finite differences, on each option once
    for (label, kw) in (("erf gelu", (;)),
                        ("tanh gelu, eps 1e-3, one position ignored", (eps = 1e-3, approximate = "tanh", ignore_index = 1)))
        @testset "finite differences: $label" begin
            grads = gpt_grads(tokens, targets, params, H; kw...).grads
            worst = 0.0
            for name in GPT_PARAMS, i in eachindex(params[name])
                fd = finite_difference(tokens, targets, params, H, name, i; kw...)
                worst = max(worst, abs(grads[name][i] - fd) / (1e-3 + abs(fd)))
            end
            @test worst < 1e-6                             # central differences of h = 1e-6: ~1e-9 here
        end
    end

    @testset "repeated tokens accumulate" begin
        # wte's column 2 is the sum of the two positions' input gradients: move wte[:, 2] and both move
        g = gpt_grads(tokens, targets, params, H).grads
        @test g.wte[:, 2] ≈ [finite_difference(tokens, targets, params, H, :wte, CartesianIndex(f, 2)) for f in 1:d] rtol = 1e-6
        @test !(g.wte[:, 2] ≈ g.wpe[:, 1]) && !(g.wte[:, 2] ≈ g.wpe[:, 3])   # neither position's alone
        @test g.wte[:, 2] ≈ g.wpe[:, 1] .+ g.wpe[:, 3]
    end

    @testset "Float32 in, Float32 out" begin
        p32 = map(a -> Float32.(a), params)
        r32 = gpt_grads(tokens, targets, p32, H)
        r64 = gpt_grads(tokens, targets, params, H)
        @test r32.loss isa Float32 && all(a -> eltype(a) == Float32, r32.grads)
        @test isapprox(r32.grads.w_q, r64.grads.w_q; rtol = 1e-3)
    end

    @testset "errors name gpt_grads" begin
        @test occursin("gpt_grads", error_text(() -> gpt_grads([1, 9], [1, 2], params, H)))
        @test occursin("num_heads", error_text(() -> gpt_grads(tokens, targets, params, 3)))
        @test occursin("targets", error_text(() -> gpt_grads(tokens, [1, 2], params, H)))
    end
end
