# Not a model: checks what the training operations receive from the adapter (types, 1-based
# labels, the params NamedTuple, frozen names) and echoes it back in their results.
const PARAMS = (:w_q, :b_q, :w_k, :b_k, :w_v, :b_v, :w_f, :b_f)

function classifier_step(x_emb, label, params, lr; frozen = String[])
    label isa Int || error("label is a $(typeof(label))")
    params isa NamedTuple && keys(params) == PARAMS || error("params: $(typeof(params))")
    all(p -> p isa Array{Float64}, values(params)) || error("params: $(typeof(params))")
    frozen isa Vector{String} || error("frozen is a $(typeof(frozen))")
    lr isa Float64 || error("lr is a $(typeof(lr))")
    grads = map(p -> fill(lr, size(p)), params)
    probs = Float64[length(frozen), size(x_emb, 1), size(x_emb, 2)]
    return (loss = float(label), probs = probs, grads = grads, params = params)
end

function classifier_train(tokens, lengths, labels, params, lr, epochs; frozen = String[])
    lengths isa Vector{Int} && labels isa Vector{Int} || error("$(typeof(lengths)), $(typeof(labels))")
    epochs isa Int || error("epochs is a $(typeof(epochs))")
    sum(lengths) == size(tokens, 2) || error("tokens $(size(tokens)) for lengths $lengths")
    return Dict("epoch_losses" => Float64.(labels), "params" => Dict(String(k) => v for (k, v) in pairs(params)))
end
