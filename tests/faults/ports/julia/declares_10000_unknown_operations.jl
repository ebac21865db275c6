# Fault: declares 10,000 operation names no contract has, and defines a correct softmax: the declaration
# is refused (a load error), in a message that names the first 20 and counts the rest, said once
# for the port rather than once per case and per output (it was 320 KB, in every output).
const attention_ports = (operations = ["no_such_operation_$(i)" for i in 1:10000],)

function softmax(x::AbstractArray; dims::Int = ndims(x))
    e = exp.(x .- maximum(x; dims = dims))
    return e ./ sum(e; dims = dims)
end
