# A partial port: only softmax (column-wise, feature-major).
softmax(x) = (e = exp.(x .- maximum(x; dims = 1)); e ./ sum(e; dims = 1))
