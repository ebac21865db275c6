# Fault: a port that finds the worker's private reply pipe (its number is in the environment)
# and writes to it: plain garbage (softmax), a well-formed frame answering another request
# (self_attention), a frame announcing an absurd length (multi_head_attention). Each of those
# cases is an error and the worker is replaced; attention, which behaves, still passes.
function forge(bytes)
    fd = parse(Int, split(ENV["ATTENTION_PORTS_WORKER_FDS"], ",")[2])
    io = fdio(fd)
    write(io, bytes)
    flush(io)
end

function softmax(x)
    forge(Vector{UInt8}("this is not a frame, just text a port wrote"))
    e = exp.(x .- maximum(x; dims = 1))
    return e ./ sum(e; dims = 1)
end

# "APr1", id 999, a body of one byte "M" (a missing-operation reply): well formed, wrong id
function self_attention(x, w_q, w_k, w_v; b_q = nothing, b_k = nothing, b_v = nothing, mask = nothing, scale = nothing)
    forge(vcat(Vector{UInt8}("APr1"), reinterpret(UInt8, [htol(UInt64(999)), htol(UInt64(1))]), UInt8('M')))
    error("unreachable: the forged reply came first")
end

# "APr1", id 0, a body of 2^62 bytes: refused from its header, before anything is allocated
function multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, num_heads; kwargs...)
    forge(vcat(Vector{UInt8}("APr1"), reinterpret(UInt8, [htol(UInt64(0)), htol(UInt64(1) << 62)])))
    sleep(30)
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = (k' * q) .* (scale === nothing ? 1 / sqrt(size(q, 1)) : scale)   # (n_k, n_q)
    mask === nothing || (s = s .+ mask)
    e = exp.(s .- maximum(s; dims = 1))
    w = e ./ sum(e; dims = 1)
    return (output = v * w, weights = w)
end
