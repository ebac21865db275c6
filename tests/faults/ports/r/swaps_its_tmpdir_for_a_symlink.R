# Fault: softmax replaces the worker's own $TMPDIR with a symbolic link to a folder that is not its
# own ($FAULT_TARGET), then ends the R session. The worker's folder is removed as a link: the
# folder it pointed to, and what that holds, stay untouched (the link was once left behind).

softmax <- function(x) {
  mine <- Sys.getenv("TMPDIR")
  unlink(mine, recursive = TRUE)
  file.symlink(Sys.getenv("FAULT_TARGET"), mine)
  base::quit(save = "no", status = 3)
}
