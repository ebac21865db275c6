# The R side of the bridge between the R worker (attention_ports/runtimes/r/worker.py) and a port.
#
# attention_ports/runtimes/r/worker.py sources this file into an environment of its own whose parent is baseenv(),
# so nothing a port does to the global environment can reach these functions, and calls them
# through rpy2: .ap_port_env(), .ap_load() and .ap_declaration() once per port loaded (one, or several in
# turn: .ap_session_state below), .ap_call() per call.
# Arrays arrive as R vectors whose memory Python wrote directly (never rpy2's memoryview()), with
# `dim` already set; results leave the same way, read straight from R's memory.

.ap_call_text <- function(call) {
  if (is.null(call)) return("")
  s <- paste(deparse(call, width.cutoff = 120L, nlines = 3L), collapse = " ")
  if (nchar(s) > 300L) s <- paste0(substr(s, 1L, 297L), "...")
  s
}

.ap_condition_text <- function(kind, cond) {
  call <- .ap_call_text(conditionCall(cond))
  msg <- conditionMessage(cond)
  if (nzchar(call)) sprintf("%s in %s : %s", kind, call, msg) else sprintf("%s: %s", kind, msg)
}

# The calls from the port's entry point down to the one that signalled, one line each. This
# bridge's own frames (tryCatch, withCallingHandlers, doTryCatch, eval(call, frame), ...) are cut:
# everything up to the last `eval(call, frame)` (ours evaluates the port's entry call), and the
# calling handler at the end. When nothing is left, the entry call itself failed (an argument the
# port's function does not take): .ap_call then shows the port's signature instead.
.ap_traceback <- function(calls) {
  if (is.null(calls)) return("")
  ours <- quote(eval(call, frame))
  last <- Position(function(cl) identical(cl, ours), calls, right = TRUE, nomatch = 0L)
  if (last > 0L) calls <- calls[-seq_len(last)]
  calls <- calls[-length(calls)]  # the calling handler itself
  n <- length(calls)
  if (n == 0L) return("")
  keep <- if (n > 20L) c(1:5, (n - 9L):n) else seq_len(n)  # deep recursion: both ends only
  heads <- vapply(calls[keep], function(cl) {
    s <- deparse(cl, width.cutoff = 100L, nlines = 1L)[1L]
    if (nchar(s) > 100L) paste0(substr(s, 1L, 97L), "...") else s
  }, "")
  if (n > 20L) heads <- c(heads[1:5], sprintf("... %d more calls ...", n - 15L), heads[6:15])
  heads <- heads[!startsWith(heads, ".handleSimpleError(")]
  paste(heads, collapse = "\n")
}

# "q, k, v, attn_mask = NULL, scale = NULL": a function's arguments as its author wrote them.
.ap_signature <- function(fn) {
  f <- formals(fn)
  parts <- vapply(names(f), function(n) {
    if (identical(f[[n]], quote(expr = ))) n else paste(n, "=", deparse(f[[n]], nlines = 1L)[1L])
  }, "")
  paste(parts, collapse = ", ")
}

# The environment a port is sourced into. Its parents are the exports of utils, then of stats,
# then base: the contract's "base/stats/utils", and not the global environment, so a port sees
# neither what another port or a script left there (a `rowSums` of its own) nor this bridge.
# Each export is bound as a promise of its value (evaluated in base, where a port's own names
# cannot reach), fetched from the package's lazy-load database when first used: fetching all
# ~650 at once cost each R process ~80 ms of its ~0.4 s start, for the few a port calls.
# The call is built with the names as values: the promise is evaluated in base, where this loop's
# `pkg` and `name` do not exist.
.ap_port_env <- function() {
  parent <- baseenv()
  for (pkg in c("utils", "stats")) {
    env <- new.env(parent = parent)
    for (name in getNamespaceExports(pkg)) {
      eval(call("delayedAssign", name, call("getExportedValue", pkg, name), baseenv(), env))
    }
    attr(env, "name") <- paste0("attention_ports:", pkg)
    parent <- env
  }
  new.env(parent = parent)
}

# What a call signature (op name + entries) means, parsed once and cached: per argument its
# kind, mode (p positional, k keyword, g group member), name and group member, and the call to
# evaluate, e.g. softmax(x) or scaled_dot_product_attention(q, k, v, mask = mask): symbols, so
# that an error's deparsed call stays short.
.ap_plans <- new.env(hash = TRUE, parent = emptyenv())
.ap_plan <- function(entries) {
  key <- paste(entries, collapse = "\n")
  plan <- .ap_plans[[key]]
  if (!is.null(plan)) return(plan)
  parts <- strsplit(c(entries[-1L]), "\t", fixed = TRUE)
  field <- function(i) vapply(parts, function(e) if (length(e) >= i) e[[i]] else "", "")
  plan <- list(kind = field(1L), mode = field(2L), name = field(3L), member = field(4L))
  in_call <- plan$mode != "g" | plan$kind == "G"
  args <- lapply(plan$name[in_call], as.name)
  names(args) <- ifelse(plan$mode[in_call] == "p", "", plan$name[in_call])
  plan$call <- as.call(c(list(as.name(entries[[1L]])), args))
  assign(key, plan, envir = .ap_plans)
  plan
}

# Bind the arguments as variables of `frame`. Arrays arrive as R vectors with their dim already
# set; the header holds, per scalar entry, a count then (numbers) the values; strings come in strs.
.ap_bind <- function(frame, plan, header, strs, arrays) {
  h <- 1L
  a <- 1L
  s <- 1L
  for (i in seq_along(plan$kind)) {
    kind <- plan$kind[[i]]
    name <- plan$name[[i]]
    if (kind == "G") {  # a parameter collection: a named list, members follow
      v <- structure(list(), names = character())
    } else if (kind == "A" || kind == "I" || kind == "L") {
      v <- arrays[[a]]
      a <- a + 1L
      if (kind == "I") storage.mode(v) <- "integer" else if (kind == "L") storage.mode(v) <- "logical"
    } else {
      cnt <- as.integer(header[[h]])
      h <- h + 1L
      if (kind == "c") {
        v <- as.character(strs[seq.int(s, length.out = cnt)])  # strs is NULL when no strings: character(0)
        s <- s + cnt
      } else {
        v <- header[seq.int(h, length.out = cnt)]
        h <- h + cnt
        if (kind == "i") v <- as.integer(v) else if (kind == "l") v <- as.logical(v)
      }
    }
    if (plan$mode[[i]] == "g" && kind != "G") {  # a group member
      grp <- get(name, envir = frame, inherits = FALSE)
      grp[[plan$member[[i]]]] <- v
      v <- grp
    }
    assign(name, v, envir = frame)
  }
}

.ap_where <- function(name) if (nzchar(name)) sprintf(" in element '%s'", name) else ""

# NA (R's missing value) is not NaN (is.nan(NA_real_) is FALSE): a port that returns NA where
# the contract wants a number, NaN included, gets an error naming the element and its position.
.ap_check_na <- function(value, name) {
  if (!anyNA(value)) return(invisible(NULL))  # one pass, nothing allocated (NaN counts here too)
  bad <- if (is.double(value)) is.na(value) & !is.nan(value) else is.na(value)
  if (!any(bad)) return(invisible(NULL))
  at <- which(bad)
  d <- dim(value)
  pos <- if (length(d) >= 2L) paste(arrayInd(at[[1L]], d), collapse = ", ") else as.character(at[[1L]])
  what <- if (nzchar(name)) sprintf("element '%s'", name) else "the result"
  more <- if (length(at) > 1L) sprintf(" (and %d more)", length(at) - 1L) else ""
  stop(sprintf(paste0("%s holds NA (R's missing value, which is not NaN) at [%s]%s, 1-based; ",
                      "the contract wants numbers there (NaN where a result is undefined)"),
               what, pos, more), call. = FALSE)
}

# Named list of numeric/logical leaves; nested lists become "outer.inner". Every name must be
# there once: list(output = WRONG, output = RIGHT) would give `$output` the first and a loop the
# last, so it is refused.
.ap_flatten <- function(value, name = "") {
  if (is.list(value)) {
    nms <- names(value)
    if (length(value) > 0L && (is.null(nms) || any(is.na(nms) | !nzchar(nms)))) {
      stop(sprintf(paste0("returned a list with unnamed elements%s; name every element, ",
                          "e.g. list(output = ..., weights = ...)"), .ap_where(name)), call. = FALSE)
    }
    dup <- unique(nms[duplicated(nms)])
    if (length(dup)) {
      times <- vapply(dup, function(d) sum(nms == d), 1L)
      stop(sprintf("returned a list with duplicate names%s: %s; name every element once",
                   .ap_where(name), paste(sprintf("'%s' (%d times)", dup, times), collapse = ", ")),
           call. = FALSE)
    }
    out <- list()
    for (i in seq_along(value)) {
      out <- c(out, .ap_flatten(value[[i]], if (nzchar(name)) paste(name, nms[[i]], sep = ".") else nms[[i]]))
    }
    return(out)
  }
  if (is.null(value)) return(list())  # NULL = absent, as for arguments
  if (!(is.numeric(value) || is.logical(value))) {
    what <- if (nzchar(name)) sprintf("element '%s'", name) else "the result"
    stop(sprintf("%s is %s (class %s); expected a numeric vector, matrix or array",
                 what, typeof(value), paste(class(value), collapse = "/")), call. = FALSE)
  }
  .ap_check_na(value, name)
  structure(list(value), names = name)
}

# list(header, values...): header = c(seconds the port's call took, n outputs, per output its
# type (0 double, 1 integer, 2 logical), ndim and dims); each value is passed as it is (no copy):
# Python reads doubles, integers and logicals from R's memory and judges the types against the
# contract.
.ap_pack <- function(flat, seconds) {
  header <- c(seconds, length(flat))
  for (v in flat) {
    d <- dim(v)
    if (is.null(d)) d <- if (length(v) == 1L) integer() else length(v)
    type <- if (is.double(v)) 0L else if (is.integer(v)) 1L else 2L
    header <- c(header, type, length(d), d)
  }
  c(list(as.double(header)), unname(flat))
}

# list(text, header, values...): text = status, message, warnings, traceback, output names...
# joined by "\x1e" (one string: one element to fetch).
.ap_call <- function(env, entries, header, strs, ...) {
  fname <- entries[[1L]]
  fn <- get0(fname, envir = env, mode = "function", inherits = FALSE)
  if (is.null(fn)) return(list("missing\x1e\x1e\x1e"))
  frame <- new.env(parent = env)
  plan <- .ap_plan(entries)
  .ap_bind(frame, plan, header, strs, list(...))
  call <- plan$call
  warns <- character()
  calls <- NULL
  start <- Sys.time()  # microseconds on Linux: the port's own time, for attention-ports bench
  res <- tryCatch(
    list(ok = TRUE, value = withCallingHandlers(
      eval(call, frame),
      warning = function(w) {
        warns <<- c(warns, .ap_condition_text("Warning", w))
        invokeRestart("muffleWarning")
      },
      error = function(e) calls <<- sys.calls()
    )),
    error = function(e) list(ok = FALSE, cond = e)
  )
  seconds <- as.double(Sys.time()) - as.double(start)
  warns <- paste(warns, collapse = "\n")
  if (!res$ok) {
    message <- .ap_condition_text("Error", res$cond)
    trace <- .ap_traceback(calls)
    if (!nzchar(trace) && identical(conditionCall(res$cond), call)) {  # the call never got in
      message <- sprintf("%s\nthe port defines %s <- function(%s); the suite calls %s (ports/CONTRACT.md)",
                         message, fname, .ap_signature(fn), .ap_call_text(call))
    }
    text <- c("error", message, warns, trace)
    return(list(paste(text, collapse = "\x1e")))
  }
  flat <- tryCatch({
    flat <- .ap_flatten(res$value)
    dup <- unique(names(flat)[duplicated(names(flat))])  # list(a.b = x, a = list(b = y))
    if (length(dup)) stop(sprintf("returned the output name(s) %s more than once (after joining nested names with '.')",
                                  paste(sprintf("'%s'", dup), collapse = ", ")), call. = FALSE)
    flat
  }, error = function(e) e)
  if (inherits(flat, "error")) {
    return(list(paste(c("badresult", conditionMessage(flat), warns, ""), collapse = "\x1e")))
  }
  c(list(paste(c("ok", "", warns, "", names(flat)), collapse = "\x1e")), .ap_pack(flat, seconds))
}

# Source every file into env (quit()/q() are replaced first by an error that says why; a port
# that calls base::quit() ends only its own worker process, and that case is an error).
# Returns c(failure, warnings...): failure is "" or the first file's error, naming the file.
.ap_load <- function(env, files) {
  no_quit <- function(...) stop("a port must not end the R session: quit()/q() are disabled", call. = FALSE)
  assign("quit", no_quit, envir = env)
  assign("q", no_quit, envir = env)
  warns <- character()
  for (f in files) {
    err <- tryCatch(withCallingHandlers(
      {
        sys.source(f, envir = env, toplevel.env = env)
        NULL
      },
      warning = function(w) {
        warns <<- c(warns, paste0(f, ": Warning: ", conditionMessage(w)))
        invokeRestart("muffleWarning")
      }), error = function(e) e)
    if (!is.null(err)) {
      call <- .ap_call_text(conditionCall(err))
      return(c(sprintf("%s: %s%s", f, if (nzchar(call)) paste0("error in ", call, " : ") else "",
                       conditionMessage(err)), warns))
    }
  }
  c("", warns)
}

# The port's optional declaration (ports/CONTRACT.md), as it is: Python checks it.
.ap_declaration <- function(env) get0("attention_ports", envir = env, inherits = FALSE)

# What a port could change of the R session outside its own environment (which every load makes
# afresh, .ap_port_env): the global environment, the options, the search path, the loaded
# namespaces and every binding in them and on the search path (base::exp replaced through
# unlockBinding and assign, stats::median through assignInNamespace), the environment variables,
# the working directory, the sinks, the task callbacks, the random number generator's kind, the
# locale. The worker loads another port in place of the last (a 'P' request: the mutation kit's
# next mutant) only while all of this is as it was before the first port loaded; otherwise the
# supervisor starts a fresh worker for it.
.ap_session_state <- function() {
  opts <- options()
  list(
    global = mget(sort(ls(globalenv(), all.names = TRUE)), envir = globalenv()),
    bindings = .ap_bindings(),
    options = opts[sort(names(opts))],
    search = search(),
    namespaces = sort(loadedNamespaces()),
    environment = as.list(Sys.getenv()),
    directory = getwd(),
    sinks = c(sink.number(), sink.number(type = "message")),
    callbacks = getTaskCallbackNames(),
    rng = RNGkind(),
    locale = Sys.getlocale()
  )
}

# Every binding of every loaded namespace and of every package on the search path (base's are its
# namespace's), as it is bound, without forcing a lazy-loaded one: substitute() gives a promise's
# expression and any other binding's value, for every name of an environment in one call. Two
# states are identical() while no binding was replaced (R compares the same objects by pointer:
# ~15 ms for R's ~6,000 default bindings, measured); calling a function, which forces its
# promise, changes nothing. .Last.value changes with every top-level call; "..." is no binding.
.ap_bindings <- function() {
  packages <- setdiff(grep("^package:", search(), value = TRUE), "package:base")
  envs <- c(lapply(sort(loadedNamespaces()), asNamespace), lapply(packages, as.environment))
  lapply(envs, function(env) {
    names <- setdiff(sort(ls(env, all.names = TRUE)), c(".Last.value", "..."))
    list(names, eval(call("substitute", as.call(c(as.name("list"), lapply(names, as.name))), env)))
  })
}

# The parts of the session that differ between two states ("" when none).
.ap_session_changes <- function(before, after) {
  same <- vapply(names(before), function(n) identical(before[[n]], after[[n]]), TRUE)
  paste(names(before)[!same], collapse = ", ")
}
