# Fault: the file itself never finishes loading (it waits, leaving the CPU to the tests beside it).
softmax(x) = (e = exp.(x .- maximum(x; dims = 1)); e ./ sum(e; dims = 1))

while true
    sleep(3600)
end
