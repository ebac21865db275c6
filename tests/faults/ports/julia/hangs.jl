# Fault: softmax never returns (it first leaves a flag file, when asked to, so that a test knows
# the call has started). Attention works. Used for timeouts, the give-up rule and orphans.
# It waits rather than spins: a timeout kills the worker's process group whatever the worker
# does, and a spin would take a core from the tests beside it for its 7 s (timeout + compile
# allowance). The spinning Julia port is tests/data/ports/julia/loop_softmax.jl.
function softmax(x)
    flag = get(ENV, "FAULT_FLAG", "")
    isempty(flag) || touch(flag)
    while true
        sleep(3600)
    end
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    s = (k' * q) .* (scale === nothing ? 1 / sqrt(size(q, 1)) : scale)   # (n_k, n_q)
    mask === nothing || (s = s .+ mask)
    e = exp.(s .- maximum(s; dims = 1))
    w = e ./ sum(e; dims = 1)
    return (output = v * w, weights = w)
end
