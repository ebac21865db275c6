# Optimizers in base R: adamw_step, one step of torch.optim.AdamW (the project's own R port).
#
# One parameter array of any shape (a matrix, a vector), its gradient and the moments m and v
# before the step, all of one shape; the update is elementwise. step is the step's number t >= 1
# (a count, not an index). Decoupled weight decay (applied to the parameter, as torch does first),
# bias-corrected moments; plain Adam is weight_decay = 0. Returns list(param, m, v).
# .dims comes from attention.R (the port's files share one environment).

.check_adamw <- function(param, grad, m, v, step, scalars) {
  arrays <- list(param = param, grad = grad, m = m, v = v)
  for (name in names(arrays)) {
    a <- arrays[[name]]
    if (!is.numeric(a) || length(a) == 0L) {
      stop(sprintf("adamw_step: %s must be a non-empty numeric array; got %s", name, class(a)[1L]), call. = FALSE)
    }
    if (!identical(dim(a), dim(param)) || length(a) != length(param)) {
      stop(sprintf("adamw_step: param, grad, m and v must have one shape; got param %s, grad %s, m %s, v %s",
                   .dims(param), .dims(grad), .dims(m), .dims(v)), call. = FALSE)
    }
    if (!all(is.finite(a))) stop(sprintf("adamw_step: %s (%s) must be finite", name, .dims(a)), call. = FALSE)
  }
  if (any(v < 0)) stop("adamw_step: v (the second moment, a mean of squares) must be >= 0", call. = FALSE)
  if (!is.numeric(step) || length(step) != 1L || !is.finite(step) || step < 1 || step != round(step)) {
    stop(sprintf("adamw_step: step must be one integer >= 1 (the step's number, a count); got %s", format(step)),
         call. = FALSE)
  }
  for (name in names(scalars)) {
    s <- scalars[[name]]
    if (!is.numeric(s) || length(s) != 1L || !is.finite(s) || s < 0) {
      stop(sprintf("adamw_step: %s must be one finite number >= 0; got %s", name, format(s)), call. = FALSE)
    }
  }
  if (scalars$beta1 >= 1 || scalars$beta2 >= 1) {
    stop("adamw_step: beta1 and beta2 must be below 1", call. = FALSE)
  }
  invisible(NULL)
}

adamw_step <- function(param, grad, m, v, step, lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
                       weight_decay = 0.01) {
  .check_adamw(param, grad, m, v, step,
               list(lr = lr, beta1 = beta1, beta2 = beta2, eps = eps, weight_decay = weight_decay))
  decayed <- param * (1 - lr * weight_decay)   # decoupled weight decay, on the parameter
  m <- beta1 * m + (1 - beta1) * grad          # first moment
  v <- beta2 * v + (1 - beta2) * grad^2        # second moment
  correction1 <- 1 - beta1^step                # bias corrections (step counts from 1)
  correction2 <- 1 - beta2^step
  m_hat <- m / correction1
  v_hat <- v / correction2
  list(param = decayed - lr * m_hat / (sqrt(v_hat) + eps), m = m, v = v)
}
