# Fault: the file itself never finishes loading.
softmax(x) = (e = exp.(x .- maximum(x; dims = 1)); e ./ sum(e; dims = 1))

while true
end
