# Fault: a port that prints while it works, in every way Julia can: println (stdout), Core.println
# (straight to the C stdout), a child process (run(`echo`)), a C write(1, ...), and stderr.
# Once, such output desynchronised the reply stream; now none of it may reach a reply or our
# stdout, and all of it is captured and shown with the case that printed it.

function shout(where)
    println("println from $where")
    Core.println("Core.println from $where")
    run(`echo "a child process (run) from $where"`)
    msg = "C write(1) from $where\n"
    ccall(:write, Cssize_t, (Cint, Ptr{UInt8}, Csize_t), 1, msg, sizeof(msg))
    println(stderr, "stderr from $where")
end

function softmax(x)
    shout("softmax")
    e = exp.(x .- maximum(x; dims = 1))
    return e ./ sum(e; dims = 1)
end

# Prints, then fails: the error carries what this call printed.
function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    shout("attention")
    error("attention is not ready yet")
end
