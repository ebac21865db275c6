# A port that does not parse.
function softmax(x)
    e = exp.(x .- maximum(x; dims = 1)
    return e ./ sum(e; dims = 1)
end
