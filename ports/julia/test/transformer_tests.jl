# Native tests of ports/julia/src/transformer.jl (included by runtests.jl): feature-major (tokens are
# columns). The expected values are the port's pieces put together another way: the block through
# multi_head_attention with an explicit causal mask, the feed-forward through naive loops, the GPT
# through decoder_block one block at a time. Small sizes: the whole set runs in seconds.

# d × d_ff feed-forward by loops, gelu (erf form) as x Φ(x) with Φ from the port's own _erf
function naive_feed_forward(x, w_1, b_1, w_2, b_2)
    hidden = naive_project(x, w_1, b_1)
    activated = [h * (1 + _erf(h / sqrt(2))) / 2 for h in hidden]
    return naive_project(activated, w_2, b_2)
end

function random_block(rng, d, d_ff)
    v() = randn(rng, d)
    return (ln1_w = 1 .+ 0.3 .* v(), ln1_b = v(), w_q = randn(rng, d, d), b_q = v(), w_k = randn(rng, d, d),
            b_k = v(), w_v = randn(rng, d, d), b_v = v(), w_o = randn(rng, d, d), b_o = v(),
            ln2_w = 1 .+ 0.3 .* v(), ln2_b = v(), w_1 = randn(rng, d_ff, d), b_1 = randn(rng, d_ff),
            w_2 = randn(rng, d, d_ff), b_2 = v())
end

# block b's parameters stacked along a last axis, as gpt_forward takes them
stack_blocks(blocks) = map((members...) -> cat(members...; dims = ndims(members[1]) + 1), blocks...)

function random_gpt(rng, d, d_ff, n_layer, vocab, n_ctx)
    blocks = [random_block(rng, d, d_ff) for _ in 1:n_layer]
    return (wte = randn(rng, d, vocab), wpe = 0.3 .* randn(rng, d, n_ctx), stack_blocks(blocks)...,
            lnf_w = 1 .+ 0.3 .* randn(rng, d), lnf_b = randn(rng, d), w_head = randn(rng, vocab, d)), blocks
end

@testset "transformer" begin
    rng = MersenneTwister(2018)
    d, d_ff, n, H = 8, 12, 5, 2
    x = randn(rng, d, n)
    p = random_block(rng, d, d_ff)
    causal = [key <= query ? 0.0 : -Inf for key in 1:n, query in 1:n]   # keys × queries

    @testset "feed_forward" begin
        y = feed_forward(x, p.w_1, p.b_1, p.w_2, p.b_2)
        @test size(y) == (d, n)
        @test approx(y, naive_feed_forward(x, p.w_1, p.b_1, p.w_2, p.b_2))
        tanh_form = feed_forward(x, p.w_1, p.b_1, p.w_2, p.b_2; approximate = "tanh")
        @test approx(tanh_form, naive_project(gelu(naive_project(x, p.w_1, p.b_1); approximate = "tanh"), p.w_2, p.b_2))
        @test tanh_form != y                                           # the form asked for is the one computed
        @test occursin("w_2 12×8", error_text(() -> feed_forward(x, p.w_1, p.b_1, permutedims(p.w_2), p.b_2)))
    end

    @testset "decoder_block agrees with its pieces" begin
        for heads in (1, H, d), (eps, approximate) in ((nothing, "none"), (1e-3, "tanh"))
            y = decoder_block(x, p, heads; eps = eps, approximate = approximate)
            e = eps === nothing ? 1e-5 : eps
            a = layer_norm(x; weight = p.ln1_w, bias = p.ln1_b, eps = e)
            attn = multi_head_attention(a, a, a, p.w_q, p.w_k, p.w_v, p.w_o, heads;
                                        b_q = p.b_q, b_k = p.b_k, b_v = p.b_v, b_o = p.b_o, mask = causal)
            h = x .+ attn.output
            m = layer_norm(h; weight = p.ln2_w, bias = p.ln2_b, eps = e)
            @test size(y) == (d, n)
            @test approx(y, h .+ feed_forward(m, p.w_1, p.b_1, p.w_2, p.b_2; approximate = approximate))
        end
        @test approx(decoder_block(x, Dict(String(k) => v for (k, v) in pairs(p)), H), decoder_block(x, p, H))
    end

    @testset "causal: a later token does not change an earlier column" begin
        later = copy(x)
        later[:, end] .= randn(rng, d)
        y, y_later = decoder_block(x, p, H), decoder_block(later, p, H)
        @test y[:, 1:(end - 1)] == y_later[:, 1:(end - 1)]             # exactly: its weight is exactly 0
        @test y[:, end] != y_later[:, end]
        gp, _ = random_gpt(rng, d, d_ff, 2, 9, 6)
        logits, logits_later = gpt_forward([3, 1, 4, 1], gp, H), gpt_forward([3, 1, 4, 9], gp, H)
        @test logits[:, 1:3] == logits_later[:, 1:3] && logits[:, 4] != logits_later[:, 4]
    end

    @testset "one token attends to itself only" begin
        x1 = x[:, 1:1]
        a = layer_norm(x1; weight = p.ln1_w, bias = p.ln1_b)
        h = x1 .+ naive_project(naive_project(a, p.w_v, p.b_v), p.w_o, p.b_o)   # weight 1 on its own value
        m = layer_norm(h; weight = p.ln2_w, bias = p.ln2_b)
        @test approx(decoder_block(x1, p, H), h .+ naive_feed_forward(m, p.w_1, p.b_1, p.w_2, p.b_2))
        @test decoder_block(x1, p, H) ≈ decoder_block(x, p, H)[:, 1:1] rtol = 1e-14
    end

    @testset "gpt_forward: embeddings, blocks in order, final norm, a column of logits per position" begin
        vocab, n_ctx = 9, 6
        gp, blocks = random_gpt(rng, d, d_ff, 2, vocab, n_ctx)
        tokens = [2, 9, 1, 2]                                          # 1-based ids
        logits = gpt_forward(tokens, gp, H; approximate = "tanh")
        @test size(logits) == (vocab, length(tokens))
        h = gp.wte[:, tokens] .+ gp.wpe[:, 1:4]
        for b in blocks
            h = decoder_block(h, b, H; approximate = "tanh")
        end
        @test approx(logits, gp.w_head * layer_norm(h; weight = gp.lnf_w, bias = gp.lnf_b))
        @test size(gpt_forward([5], gp, H)) == (vocab, 1)
        @test size(gpt_forward(collect(1:n_ctx), gp, H)) == (vocab, n_ctx)
        @test occursin("1-based", error_text(() -> gpt_forward([0, 1], gp, H)))
        @test occursin("n_ctx = 6", error_text(() -> gpt_forward(ones(Int, 7), gp, H)))
        @test occursin("num_heads = 3", error_text(() -> gpt_forward([1], gp, 3)))
        @test occursin("w_q", error_text(() -> gpt_forward([1], merge(gp, (w_q = gp.w_q[:, :, 1],)), H)))
    end

    @testset "Float32 in, Float32 out" begin
        p32 = map(a -> Float32.(a), p)
        x32 = Float32.(x)
        ffn = feed_forward(x32, p32.w_1, p32.b_1, p32.w_2, p32.b_2)
        @test eltype(ffn) == Float32
        y32 = decoder_block(x32, p32, H)
        @test eltype(y32) == Float32
        @test y32 ≈ decoder_block(x, p, H) rtol = 1e-4
        gp, _ = random_gpt(rng, d, d_ff, 2, 9, 6)
        @test eltype(gpt_forward([1, 2, 3], map(a -> Float32.(a), gp), H; eps = 1f-5)) == Float32
    end
end
