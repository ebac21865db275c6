# Declares self_attention but defines no such function: its cases are errors (a promise broken),
# not `missing`.
const attention_ports = (operations = ["softmax", "self_attention"],)

softmax(x) = (e = exp.(x .- maximum(x; dims = 1)); e ./ sum(e; dims = 1))
