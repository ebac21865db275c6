# A few AdamW steps of a GPT in base R (ports/CONTRACT.md, "gpt_train"): `steps` times on the same
# batch, gpt_grads' loss and gradients, then adamw_step on every parameter. The moments start at
# zero and are carried from step to step; step t's bias corrections use t = 1, 2, ...; the weight
# decay applies to every parameter (torch.optim.AdamW(model.parameters())); Adam's eps is torch's
# 1e-8 (`eps` is the layer norms'). Pieces from the port's other files: gpt_grads, adamw_step.

gpt_train <- function(tokens, targets, params, num_heads, steps, ignore_index = NULL, eps = 1e-5,
                      approximate = "none", lr = 1e-3, beta1 = 0.9, beta2 = 0.999, weight_decay = 0.01) {
  if (!is.numeric(steps) || length(steps) != 1L || !is.finite(steps) || steps < 1 || steps != round(steps)) {
    stop(sprintf("gpt_train: steps must be one integer >= 1 (the number of AdamW steps); got %s", format(steps)),
         call. = FALSE)
  }
  zero <- function(a) if (is.null(dim(a))) numeric(length(a)) else array(0, dim(a))
  m <- lapply(params, zero)
  v <- lapply(params, zero)
  losses <- numeric(steps)
  for (t in seq_len(steps)) {
    step <- gpt_grads(tokens, targets, params, num_heads, ignore_index = ignore_index, eps = eps,
                      approximate = approximate)
    losses[t] <- step$loss                                     # before the step's update
    for (name in names(step$grads)) {                          # every gradient first, then the updates
      up <- adamw_step(params[[name]], step$grads[[name]], m[[name]], v[[name]], t, lr = lr, beta1 = beta1,
                       beta2 = beta2, eps = 1e-8, weight_decay = weight_decay)
      params[[name]] <- up$param
      m[[name]] <- up$m
      v[[name]] <- up$v
    }
  }
  list(losses = losses, params = params)
}
