# Run the R port's native tests:  Rscript ports/r/run_tests.R
#
# Sources every ports/r/R/*.R (sorted) into one environment, runs tests/testthat/ in it, and ends
# with the line `r: N passed, M failed` (N, M count expectations; an erroring test counts as a
# failure). Exits non-zero on any failure or error, or when no test ran at all (then the line
# reads `r: 0 passed, 1 failed`, so that nothing parsing it can mistake the run for a success).

if (!requireNamespace("testthat", quietly = TRUE)) {
  cat("r: testthat is not installed (Debian: apt-get install r-cran-testthat; or scripts/install_r.sh)\n")
  quit(status = 2)
}

here <- local({
  file_arg <- grep("^--file=", commandArgs(trailingOnly = FALSE), value = TRUE)
  if (length(file_arg)) dirname(normalizePath(sub("^--file=", "", file_arg[[1L]]))) else getwd()
})

port_env <- new.env(parent = globalenv())
for (f in sort(list.files(file.path(here, "R"), pattern = "\\.R$", full.names = TRUE))) {
  sys.source(f, envir = port_env, toplevel.env = port_env)
}

results <- tryCatch(
  testthat::test_dir(
    file.path(here, "tests", "testthat"),
    env = port_env,
    reporter = testthat::ProgressReporter$new(show_praise = FALSE),
    stop_on_failure = FALSE
  ),
  error = function(e) e
)
if (inherits(results, "error")) { # no test files, a test file that does not parse, ...
  cat("r: the test run itself failed:", conditionMessage(results), "\n")
  cat("r: 0 passed, 1 failed\n")
  quit(status = 1)
}
df <- as.data.frame(results)
failed <- sum(df$failed) + sum(df$error)
passed <- sum(df$nb) - sum(df$failed) - sum(df$skipped) - sum(df$warning)
if (passed + failed == 0) { # nothing ran (or all skipped): a failure, so no parser reads success
  cat("r: no tests ran\n")
  cat("r: 0 passed, 1 failed\n")
  quit(status = 1)
}
cat(sprintf("r: %d passed, %d failed\n", passed, failed))
quit(status = if (failed > 0) 1 else 0)
