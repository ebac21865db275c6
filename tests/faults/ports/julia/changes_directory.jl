# Fault: softmax moves Julia's working directory (cd) and returns (correctly). Our own relative
# paths (a --json report) must not move with it.
function softmax(x)
    cd(tempdir())
    e = exp.(x .- maximum(x; dims = 1))
    return e ./ sum(e; dims = 1)
end
