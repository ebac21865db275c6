# Fault: softmax works; scaled_dot_product_attention never returns (it first leaves a flag file,
# when asked to, so that a test knows the call has started). Used to interrupt a run part-way:
# the softmax cases (earlier in the manifest) pass, then the run hangs in attention.
function softmax(x)
    e = exp.(x .- maximum(x; dims = 1))
    return e ./ sum(e; dims = 1)
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    flag = get(ENV, "FAULT_FLAG", "")
    isempty(flag) || touch(flag)
    while true
        q = q .+ 0
    end
end
