# Native tests of seed 003's classifier (ports/julia/src/classifier.jl), included by runtests.jl
# after the port and its naive helpers (naive_attention, naive_project, error_text, rng, approx).
# The gradients are checked against central finite differences of the loss, computed here from
# the forward pass alone, so a backward that is wrong for n > 1 (like the seed's) fails.

const PNAMES = (:w_q, :b_q, :w_k, :b_k, :w_v, :b_v, :w_f, :b_f)

function random_params(rng, e; c = 3, scale = 0.5)
    d = e + 1
    return (w_q = scale .* randn(rng, d, d), b_q = scale .* randn(rng, d),
            w_k = scale .* randn(rng, d, d), b_k = scale .* randn(rng, d),
            w_v = scale .* randn(rng, d, d), b_v = scale .* randn(rng, d),
            w_f = scale .* randn(rng, c, d), b_f = scale .* randn(rng, c))
end

# The loss from the forward pass only: -log(probs[label]).
fd_loss(x_emb, label, params) = -log(classifier_forward(x_emb, params).probs[label])

# Central differences of the loss for every entry of every parameter.
function fd_grads(x_emb, label, params; h = 1e-6)
    grads = map(zero, params)
    for name in PNAMES, i in eachindex(params[name])
        plus, minus = map(copy, params), map(copy, params)
        plus[name][i] += h
        minus[name][i] -= h
        grads[name][i] = (fd_loss(x_emb, label, plus) - fd_loss(x_emb, label, minus)) / (2h)
    end
    return grads
end

@testset "classifier_forward" begin
    e, n = 3, 5
    x_emb, p = randn(rng, e, n), random_params(rng, e)
    r = classifier_forward(x_emb, p)
    @test keys(r) == (:x, :q, :k, :v, :weights, :z, :f, :pooled, :probs)
    d = e + 1
    @test size(r.x) == (d, n) && r.x[1:e, :] == x_emb && r.x[d, :] == 0:(n - 1)   # position row last
    @test size(r.weights) == (n, n) && all(sum(r.weights; dims = 1) .≈ 1)         # keys × queries
    q, k, v = naive_project(r.x, p.w_q, p.b_q), naive_project(r.x, p.w_k, p.b_k), naive_project(r.x, p.w_v, p.b_v)
    @test approx(r.q, q) && approx(r.k, k) && approx(r.v, v)
    w, z = naive_attention(q, k, v; scale = 1 / sqrt(d))                          # sqrt(d), not sqrt(d*n)
    @test approx(r.weights, w) && approx(r.z, z)
    f = naive_project(z, p.w_f, p.b_f)
    @test approx(r.f, f) && size(r.f) == (3, n)
    @test approx(r.pooled, [sum(f[c, :]) / n for c in 1:3])
    @test approx(r.probs, naive_softmax_column(r.pooled)) && sum(r.probs) ≈ 1
    # n = 1: one key, whose weight is exactly 1
    @test classifier_forward(x_emb[:, 1:1], p).weights == fill(1.0, 1, 1)
end

@testset "classifier_step gradients vs finite differences (e $e, n $n)" for (e, n) in ((3, 4), (2, 2), (4, 1), (3, 7))
    x_emb, p = randn(rng, e, n), random_params(rng, e)
    label = rand(rng, 1:3)
    r = classifier_step(x_emb, label, p, 0.1)
    @test keys(r) == (:loss, :probs, :grads, :params)
    @test keys(r.grads) == PNAMES && keys(r.params) == PNAMES
    @test r.loss ≈ fd_loss(x_emb, label, p) rtol = 1e-13
    @test r.probs ≈ classifier_forward(x_emb, p).probs rtol = 1e-14
    fd = fd_grads(x_emb, label, p)
    for name in PNAMES
        g = r.grads[name]
        @test size(g) == size(p[name])
        @test maximum(abs, g .- fd[name]) <= 1e-7 * max(1, maximum(abs, g))
        @test r.params[name] == p[name] .- 0.1 .* g                                 # plain SGD
    end
    if n == 1   # one key: the softmax Jacobian is 0, so the query/key gradients are exactly zero
        @test all(iszero, r.grads.w_q) && all(iszero, r.grads.b_q) && all(iszero, r.grads.w_k) && all(iszero, r.grads.b_k)
    else        # not vacuous: the query/key gradients are real and the bias of k gets none (shift invariance)
        @test maximum(abs, r.grads.w_q) > 1e-3 && maximum(abs, r.grads.w_k) > 1e-3
        @test maximum(abs, r.grads.b_k) < 1e-14
    end
end

@testset "classifier_step: frozen, lr = 0, large positions, Dict params" begin
    e, n = 3, 6
    x_emb, p = randn(rng, e, n), random_params(rng, e)
    free = classifier_step(x_emb, 2, p, 0.05)
    frozen = classifier_step(x_emb, 2, p, 0.05; frozen = ["w_f", "b_f"])
    @test frozen.params.w_f == p.w_f && frozen.params.b_f == p.b_f                 # unchanged ...
    @test frozen.grads.w_f == free.grads.w_f && any(!iszero, frozen.grads.w_f)     # ... but reported
    @test all(frozen.params[name] == free.params[name] for name in PNAMES[1:6])
    @test frozen.params.w_f !== p.w_f                                             # a copy, not the caller's array
    @test classifier_step(x_emb, 2, p, 0.0).params == p
    @test classifier_step(x_emb, 2, p, 0.05; frozen = String[]).params == free.params
    # 42 tokens with positions up to 41: stable, finite
    big = classifier_step(randn(rng, e, 42), 1, random_params(rng, e; scale = 1.0), 0.01)
    @test isfinite(big.loss) && all(g -> all(isfinite, g), big.grads)
    dict = Dict(String(k) => v for (k, v) in pairs(p))
    @test classifier_step(x_emb, 2, dict, 0.05).params == free.params
end

@testset "classifier_train" begin
    e = 3
    p = random_params(rng, e; scale = 0.3)
    lengths = [3, 0, 1, 4, 2]                      # sentence 2 has no known words: skipped, not counted
    labels = [1, 2, 3, 2, 1]
    tokens = randn(rng, e, sum(lengths))
    r = classifier_train(tokens, lengths, labels, p, 0.1, 3; frozen = ["b_q"])
    @test keys(r) == (:epoch_losses, :params) && length(r.epoch_losses) == 3
    # the same thing by hand: one step per non-empty sentence, positions restarting at 0
    by_hand, ends, losses = p, cumsum(lengths), Float64[]
    for epoch in 1:3
        total = 0.0
        for i in eachindex(lengths)
            lengths[i] == 0 && continue
            s = classifier_step(tokens[:, (ends[i] - lengths[i] + 1):ends[i]], labels[i], by_hand, 0.1; frozen = ["b_q"])
            by_hand, total = s.params, total + s.loss
        end
        push!(losses, total / 4)                   # 4 trained sentences, not 5
    end
    @test r.epoch_losses == losses && r.params == by_hand && r.params.b_q == p.b_q
    @test r.epoch_losses[3] < r.epoch_losses[1]
    zero_epochs = classifier_train(tokens, lengths, labels, p, 0.1, 0)
    @test isempty(zero_epochs.epoch_losses) && zero_epochs.params == p
end

@testset "classifier errors name the argument and the sizes" begin
    p = random_params(rng, 3)
    msg = error_text(() -> classifier_forward(randn(4, 5), p))
    @test occursin("ArgumentError", msg) && occursin("x_emb 4×5", msg) && occursin("e = d - 1 = 3", msg)
    msg = error_text(() -> classifier_forward(randn(3, 5), merge(p, (w_f = randn(4, 3),))))
    @test occursin("w_f 4×3", msg) && occursin("w_q 4×4", msg)
    @test occursin("1:3", error_text(() -> classifier_step(randn(3, 2), 0, p, 0.1)))
    @test occursin("1:3", error_text(() -> classifier_step(randn(3, 2), 4, p, 0.1)))
    @test occursin("W_f", error_text(() -> classifier_step(randn(3, 2), 1, p, 0.1; frozen = ["W_f"])))
    @test occursin("lr", error_text(() -> classifier_step(randn(3, 2), 1, p, -1.0)))
    @test occursin("no member b_v", error_text(() -> classifier_forward(randn(3, 2), Base.structdiff(p, (b_v = 0,)))))
    msg = error_text(() -> classifier_train(randn(3, 5), [2, 2], [1, 2], p, 0.1, 1))
    @test occursin("summing to size(tokens, 2) = 5", msg)
    @test occursin("none with a token", error_text(() -> classifier_train(randn(3, 0), [0], [1], p, 0.1, 1)))
end
