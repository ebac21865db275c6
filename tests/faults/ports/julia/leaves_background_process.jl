# Fault: softmax starts a background process and returns (correctly). The process must not
# outlive the run: closing the port kills the worker's whole process group, even after the
# worker itself has quit cleanly.
function softmax(x)
    run(`sleep $(get(ENV, "FAULT_MARKER", "3600"))`; wait = false)
    e = exp.(x .- maximum(x; dims = 1))
    return e ./ sum(e; dims = 1)
end
