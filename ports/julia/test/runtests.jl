# Native tests of our Julia port (ports/julia/src/*.jl; the classifier's, the norms', gelu's, the
# position operations', lm_loss's, the transformer's, its gradient's, adamw_step's and gpt_train's test sets are in
# classifier_tests.jl, norms_tests.jl, activations_tests.jl, positions_tests.jl, losses_tests.jl,
# transformer_tests.jl, transformer_grads_tests.jl, optim_tests.jl and transformer_train_tests.jl),
# standard library only.
#
#   julia ports/julia/test/runtests.jl
#
# Prints the usual Test summary, then a last line `julia: N passed, M failed`; exits non-zero on
# any failure or error. The expected values come from plain loops written independently of the
# vectorised port, in the same feature-major layout (tokens are columns).
using Test
using LinearAlgebra: I
using Random: MersenneTwister

include(joinpath(@__DIR__, "..", "src", "attention.jl"))
include(joinpath(@__DIR__, "..", "src", "classifier.jl"))
include(joinpath(@__DIR__, "..", "src", "norms.jl"))
include(joinpath(@__DIR__, "..", "src", "activations.jl"))
include(joinpath(@__DIR__, "..", "src", "positions.jl"))
include(joinpath(@__DIR__, "..", "src", "losses.jl"))
include(joinpath(@__DIR__, "..", "src", "transformer.jl"))
include(joinpath(@__DIR__, "..", "src", "optim.jl"))
include(joinpath(@__DIR__, "..", "src", "transformer_grads.jl"))
include(joinpath(@__DIR__, "..", "src", "transformer_train.jl"))

# --- independent loop implementations ------------------------------------------------------------
function naive_softmax_column(s::AbstractVector)
    m = maximum(s)
    e = [exp(x - m) for x in s]
    return e ./ sum(e)
end

function naive_attention(q, k, v; mask = nothing, scale = nothing)
    d_k, n_q = size(q)
    n_k = size(k, 2)
    s = scale === nothing ? 1 / sqrt(d_k) : scale
    weights = zeros(n_k, n_q)
    output = zeros(size(v, 1), n_q)
    for j in 1:n_q
        scores = [s * sum(q[f, j] * k[f, i] for f in 1:d_k) + (mask === nothing ? 0.0 : mask[i, j]) for i in 1:n_k]
        all(isequal(-Inf), scores) && continue
        weights[:, j] = naive_softmax_column(scores)
        output[:, j] = sum(weights[i, j] * v[:, i] for i in 1:n_k)
    end
    return weights, output
end

naive_project(x, w, b) = [sum(w[o, f] * x[f, t] for f in 1:size(x, 1)) + (b === nothing ? 0.0 : b[o])
                          for o in 1:size(w, 1), t in 1:size(x, 2)]

function error_text(f)
    try
        f()
    catch e
        return sprint(showerror, e)
    end
    return "no error"
end

const rng = MersenneTwister(20240603)
approx(a, b) = size(a) == size(b) && isapprox(a, b; rtol = 1e-12, atol = 1e-12)

ts = Test.DefaultTestSet("julia port")
Test.push_testset(ts)
try
    @testset "softmax" begin
        x = randn(rng, 4, 3)                                   # 4 features x 3 columns
        y = softmax(x)
        @test size(y) == (4, 3)
        @test all(sum(y; dims = 1) .≈ 1)                       # each column sums to 1
        @test approx(y, hcat([naive_softmax_column(x[:, j]) for j in 1:3]...))
        @test all(isfinite, softmax([1000.0 -1000.0; 999.0 -1001.0]))  # stable for large scores
        @test softmax([1000.0, 999.0]) ≈ naive_softmax_column([1.0, 0.0])
        z = softmax([-Inf 0.0; -Inf 1.0])
        @test all(isnan, z[:, 1])                              # all -Inf column: NaN (0/0)
        @test sum(z[:, 2]) ≈ 1
        @test softmax(x; dims = 2) ≈ permutedims(softmax(permutedims(x)))
        @test softmax([1, 2, 3]) ≈ naive_softmax_column([1.0, 2.0, 3.0])   # integers are fine
    end

    @testset "scaled_dot_product_attention" begin
        for (d_k, d_v, n_q, n_k) in ((3, 3, 4, 4), (5, 2, 3, 6), (2, 7, 1, 5))
            q, k, v = randn(rng, d_k, n_q), randn(rng, d_k, n_k), randn(rng, d_v, n_k)
            r = scaled_dot_product_attention(q, k, v)
            @test r isa NamedTuple && keys(r) == (:output, :weights)
            @test size(r.output) == (d_v, n_q) && size(r.weights) == (n_k, n_q)
            w, o = naive_attention(q, k, v)
            @test approx(r.weights, w) && approx(r.output, o)
            @test all(sum(r.weights; dims = 1) .≈ 1)
            r1 = scaled_dot_product_attention(q, k, v; scale = 1)
            w1, o1 = naive_attention(q, k, v; scale = 1.0)
            @test approx(r1.weights, w1) && approx(r1.output, o1)
            mask = [rand(rng) < 0.3 ? -Inf : 0.5 * randn(rng) for _ in 1:n_k, _ in 1:n_q]
            mask[:, 1] .= -Inf                                 # query 1 sees nothing
            rm = scaled_dot_product_attention(q, k, v; mask = mask, scale = 0.7)
            wm, om = naive_attention(q, k, v; mask = mask, scale = 0.7)
            @test approx(rm.weights, wm) && approx(rm.output, om)
            @test all(iszero, rm.weights[:, 1]) && all(iszero, rm.output[:, 1])
            @test !any(isnan, rm.weights)
        end
        # a hand-computed case: identity queries and keys, unscaled
        r = scaled_dot_product_attention(Matrix(1.0I, 2, 2), Matrix(1.0I, 2, 2), [1.0 3.0; 2.0 4.0]; scale = 1)
        p = exp(1) / (exp(1) + 1)
        @test r.weights ≈ [p 1-p; 1-p p]
        @test r.output ≈ [1.0 3.0; 2.0 4.0] * [p 1-p; 1-p p]
        # errors name every size
        msg = error_text(() -> scaled_dot_product_attention(randn(3, 4), randn(2, 5), randn(6, 5)))
        @test occursin("ArgumentError", msg) && occursin("q 3×4", msg) && occursin("k 2×5", msg) && occursin("v 6×5", msg)
        msg = error_text(() -> scaled_dot_product_attention(randn(3, 4), randn(3, 5), randn(6, 5); mask = zeros(4, 5)))
        @test occursin("mask 4×5", msg) && occursin("5×4", msg)
        @test occursin("n_k", error_text(() -> scaled_dot_product_attention(randn(3, 4), randn(3, 5), randn(6, 4))))
    end

    @testset "self_attention" begin
        n, d_in, d_k, d_v = 5, 4, 3, 6
        x = randn(rng, d_in, n)
        w_q, w_k, w_v = randn(rng, d_k, d_in), randn(rng, d_k, d_in), randn(rng, d_v, d_in)
        b_q, b_k, b_v = randn(rng, d_k), randn(rng, d_k), randn(rng, d_v)
        for (bq, bk, bv) in ((nothing, nothing, nothing), (b_q, b_k, b_v)),
            mask in (nothing, [i <= j ? 0.0 : -Inf for i in 1:n, j in 1:n])   # causal: key i <= query j
            r = self_attention(x, w_q, w_k, w_v; b_q = bq, b_k = bk, b_v = bv, mask = mask)
            @test keys(r) == (:q, :k, :v, :weights, :output)
            q, k, v = naive_project(x, w_q, bq), naive_project(x, w_k, bk), naive_project(x, w_v, bv)
            @test approx(r.q, q) && approx(r.k, k) && approx(r.v, v)
            w, o = naive_attention(q, k, v; mask = mask)
            @test approx(r.weights, w) && approx(r.output, o)
            @test size(r.output) == (d_v, n) && size(r.weights) == (n, n)
        end
        msg = error_text(() -> self_attention(x, randn(d_k, d_in + 1), w_k, w_v))
        @test occursin("x 4×5", msg) && occursin("w_q 3×5", msg)
        @test occursin("b_v", error_text(() -> self_attention(x, w_q, w_k, w_v; b_v = randn(d_v + 1))))
        @test occursin("d_k", error_text(() -> self_attention(x, w_q, randn(d_k + 1, d_in), w_v)))
    end

    @testset "multi_head_attention" begin
        for (d_model, h, n_q, n_k) in ((8, 4, 3, 5), (6, 2, 4, 4), (4, 1, 2, 3))
            query, key, value = randn(rng, d_model, n_q), randn(rng, d_model, n_k), randn(rng, d_model, n_k)
            ws = [randn(rng, d_model, d_model) for _ in 1:4]
            bs = [randn(rng, d_model) for _ in 1:4]
            mask = [rand(rng) < 0.3 ? -Inf : 0.0 for _ in 1:n_k, _ in 1:n_q]
            mask[:, end] .= -Inf
            for (b, m) in ((fill(nothing, 4), nothing), (bs, mask))
                r = multi_head_attention(query, key, value, ws..., h;
                                         b_q = b[1], b_k = b[2], b_v = b[3], b_o = b[4], mask = m)
                @test keys(r) == (:output, :weights)
                @test size(r.output) == (d_model, n_q) && size(r.weights) == (n_k, n_q, h)
                q, k, v = naive_project(query, ws[1], b[1]), naive_project(key, ws[2], b[2]), naive_project(value, ws[3], b[3])
                d_head = d_model ÷ h
                concat = zeros(d_model, n_q)
                for i in 1:h
                    rows = ((i - 1) * d_head + 1):(i * d_head)
                    w, o = naive_attention(q[rows, :], k[rows, :], v[rows, :]; mask = m)
                    @test approx(r.weights[:, :, i], w)
                    concat[rows, :] = o
                end
                @test approx(r.output, naive_project(concat, ws[4], b[4]))
                if m !== nothing
                    @test all(iszero, r.weights[:, end, :])
                end
            end
        end
        q8 = randn(rng, 8, 2)
        w8 = randn(rng, 8, 8)
        @test occursin("num_heads = 3", error_text(() -> multi_head_attention(q8, q8, q8, w8, w8, w8, w8, 3)))
        msg = error_text(() -> multi_head_attention(q8, q8, q8, w8, w8, randn(8, 7), w8, 2))
        @test occursin("w_v 8×7", msg) && occursin("query 8×2", msg)
    end

    include(joinpath(@__DIR__, "classifier_tests.jl"))
    include(joinpath(@__DIR__, "norms_tests.jl"))
    include(joinpath(@__DIR__, "activations_tests.jl"))
    include(joinpath(@__DIR__, "positions_tests.jl"))
    include(joinpath(@__DIR__, "losses_tests.jl"))
    include(joinpath(@__DIR__, "transformer_tests.jl"))
    include(joinpath(@__DIR__, "transformer_grads_tests.jl"))
    include(joinpath(@__DIR__, "optim_tests.jl"))
    include(joinpath(@__DIR__, "transformer_train_tests.jl"))
finally
    Test.pop_testset()
end

# Count what the test sets recorded (DefaultTestSet's fields are the same on Julia 1.5 to 1.11).
function counts(ts::Test.DefaultTestSet)
    passed, failed = ts.n_passed, 0
    for r in ts.results
        if r isa Test.DefaultTestSet
            p, f = counts(r)
            passed += p
            failed += f
        elseif r isa Test.Fail || r isa Test.Error
            failed += 1
        end
    end
    return passed, failed
end

Test.print_test_results(ts)
passed, failed = counts(ts)
println("julia: $passed passed, $failed failed")
exit(failed == 0 ? 0 : 1)
