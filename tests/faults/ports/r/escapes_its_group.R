# Fault: every call first starts three `sleep`s that leave the worker's process group and session:
# `setsid sleep`, a double fork into a session of its own, and `nohup ... &` then `setsid`; it goes
# on once all three run. Each `sleep`'s command line is `sleep $FAULT_MARKER<op><how><n>` (op: 1
# softmax, 2 self_attention, 3 scaled_dot_product_attention; how: 1, 2, 3 as listed; n: the call's
# number in this worker). Then softmax returns correctly, self_attention quits (a crash), and
# attention hangs (a timeout). Once its sleeps run, a call leaves the flag file $FAULT_FLAG<op>,
# when asked to, so that a test knows they started. None of the sleeps may outlive the run.

calls <- 0

escape <- function(op) {
  calls <<- calls + 1
  m <- paste0(Sys.getenv("FAULT_MARKER", "987.654"), op)
  status <- system(gsub("N", calls, sprintf(paste(
    "setsid sleep %s1N >/dev/null 2>&1 &",
    "( setsid sleep %s2N >/dev/null 2>&1 & ) &",
    "nohup setsid sleep %s3N >/dev/null 2>&1 &",
    "n() { pgrep -c -f '^sleep %s[123]N$'; }",
    "i=0; while [ \"$(n)\" != 3 ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done",
    "[ \"$(n)\" = 3 ]",
    sep = "\n"
  ), m, m, m, m)))
  flag <- Sys.getenv("FAULT_FLAG")
  if (status == 0 && nzchar(flag)) file.create(paste0(flag, op))
}

softmax <- function(x) {
  escape(1)
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}

self_attention <- function(x, w_q, w_k, w_v, b_q = NULL, b_k = NULL, b_v = NULL, mask = NULL, scale = NULL) {
  escape(2)
  base::quit(save = "no", status = 3)
}

scaled_dot_product_attention <- function(q, k, v, mask = NULL, scale = NULL) {
  escape(3)
  repeat {}
}
