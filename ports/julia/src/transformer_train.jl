# A few AdamW steps of a GPT in Julia (ports/CONTRACT.md, "gpt_train"): `steps` times on the same
# batch, gpt_grads' loss and gradients, then adamw_step on every parameter. The moments start at
# zero and are carried from step to step; step t's bias corrections use t = 1, 2, ...; the weight
# decay applies to every parameter (torch.optim.AdamW(model.parameters())); Adam's eps is torch's
# 1e-8 (`eps` is the layer norms'). Pieces from the port's other files: gpt_grads, adamw_step.

"""
    gpt_train(tokens, targets, params, num_heads, steps; ignore_index = nothing, eps = nothing,
              approximate = "none", lr = 1e-3, beta1 = 0.9, beta2 = 0.999, weight_decay = 0.01)

`steps` AdamW steps of the GPT on one batch. Returns `(losses, params)`: each step's loss (before
its update) and the final parameters, shaped as `params`.
"""
function gpt_train(tokens::AbstractVector{<:Real}, targets::AbstractVector, params, num_heads, steps;
                   ignore_index = nothing, eps = nothing, approximate = "none", lr = 1e-3, beta1 = 0.9,
                   beta2 = 0.999, weight_decay = 0.01)
    steps isa Real && isfinite(steps) && isinteger(steps) && steps >= 1 ||
        throw(ArgumentError("gpt_train: steps must be an integer ≥ 1 (the number of AdamW steps); got $(repr(steps))"))
    p = params
    m = map(zero, p)
    v = map(zero, p)
    T = float(eltype(p.wte))
    losses = zeros(T, Int(steps))
    for t in 1:Int(steps)
        step = gpt_grads(tokens, targets, p, num_heads; ignore_index = ignore_index, eps = eps,
                         approximate = approximate)
        losses[t] = step.loss                                  # before the step's update
        names = keys(step.grads)                               # every gradient first, then the updates
        ups = map(n -> adamw_step(p[n], step.grads[n], m[n], v[n], t; lr = lr, beta1 = beta1, beta2 = beta2,
                                  eps = 1e-8, weight_decay = weight_decay), names)
        p = NamedTuple{names}(map(u -> u.param, ups))
        m = NamedTuple{names}(map(u -> u.m, ups))
        v = NamedTuple{names}(map(u -> u.v, ups))
    end
    return (losses = losses, params = p)
end
