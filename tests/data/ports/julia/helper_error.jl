# KNOWN-BAD test port (tests/test_diagnose.py): softmax calls a helper with a keyword it does not
# take; the error's stack trace must show the port's frames only, none of the worker's.
const attention_ports = (operations = ["softmax"],)

normalise(e; dims) = e ./ sum(e; dims = dims)

function softmax(x)
    e = exp.(x .- maximum(x; dims = 1))
    return normalise(e; dim = 1)                # BUG: the keyword is `dims`
end
