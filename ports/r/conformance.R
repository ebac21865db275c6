# attention-ports conformance, in R alone: judge an R port against the golden fixtures with base R
# and testthat, no Python.
#
#   Rscript conformance.R [options] PORT.R [MORE.R | DIR]...
#
#   --fixtures DIR   the fixtures folder (default: the one shipped with this file, ../../fixtures: in
#                    a checkout and in an unpacked wheel, where both sit under attention_ports/_assets)
#   --case GLOB      only the cases whose id matches GLOB (* and ?); repeatable
#   --junit FILE     also write a JUnit XML report (one <testcase> per case)
#   --json FILE      also write the results as `attention-ports verify --json` does (per output)
#   --reporter NAME  the testthat reporter (default "progress"; "summary", "check", "silent", ...)
#   --strict         a `missing` case (an operation the port does not implement) fails the run
#                    (a testthat failure, a JUnit <failure>), still counted as missing
#
# Exactly the Python suite's judgement (`attention-ports verify --port r=PORT.R`): the same
# fixtures, through fixtures/index.tsv (base R reads no JSON; the index is generated from the
# manifest and drift-gated with it); the same call of each operation, made by the same bridge
# code as the Python R worker (ports/r/worker.R, sourced here: arguments, the port's own
# environment, its declaration, result checks); and the same comparison rule: an element agrees
# iff both are NaN, or both the same infinity, or both finite and |actual - expected| <= bound,
# its own bound from bound.<name>.npy. A port's declared `masked_query` convention picks
# expected.<name>.<convention>.npy where the fixtures have one for a case.
#
# R computes in double only: a port's declared `precision` may only be "float64" (any other is
# declaration.py's load error), and a precision tier's folder (fixtures/precision/<name>/, its
# index's `precision` record) is bad usage here: judge an R port on the main fixtures.
#
# Per case and output: pass, fail (worst element in 1-based indices of the R result, expected,
# actual, bound, abs/rel/ulp error, err/bound; an output the operation owes and did not return),
# error (the port's own R error) or missing (an operation the port does not implement). One
# test_that() per case (its expectations: one per output). Ends with the line
# `r conformance: N passed, M failed, K missing` (cases, each counted once: N + M + K is every
# case) and exits 0 when nothing failed, 1 when something did (or, with --strict, something was
# missing; or, under CI=true, nothing passed), 2 for bad usage or bad fixtures, 3 when this runner
# itself broke.
#
# Unlike the Python suite, the port runs in this R process, unsupervised: a port that hangs,
# crashes or quits R takes the run with it (R's own quit()/q() are disabled for the port).

.conformance <- new.env()
local(envir = .conformance, {

  OUTCOMES <- c("pass", "missing", "fail", "error")  # worst last, as the Python runner ranks them
  INDEX_FORMAT <- "1"
  FIXTURE_FORMAT <- "2"
  MASKED_QUERY <- c("zeros", "nan", "uniform")
  FIELDS <- c("operations", "masked_query", "precision", "rope_pairing")  # attention_ports/runtimes/declaration.py
  PRECISIONS <- c("float64", "float32", "bfloat16/float32", "float16/float32", "float16")  # spec/precision.py FORMATS
  PAIRINGS <- c("halves", "interleaved")  # attention_ports/spec/pairing.py; the first is the default
  PAIRING_OPS <- "rotary_embedding"

  usage_error <- function(...) stop(structure(class = c("usage_error", "error", "condition"),
                                              list(message = paste0(...), call = NULL)))

  # ------------------------------------------------------------------------------------------
  # Arguments

  parse_args <- function(argv) {
    opts <- list(fixtures = NULL, cases = character(), junit = NULL, json = NULL,
                 reporter = "progress", strict = FALSE, ports = character(), help = FALSE)
    takes <- c("--fixtures", "--case", "--junit", "--json", "--reporter")
    i <- 1L
    while (i <= length(argv)) {
      a <- argv[[i]]
      value <- NULL
      if (grepl("^--[a-z]+=", a)) {
        value <- sub("^--[a-z]+=", "", a)
        a <- sub("=.*$", "", a)
      }
      if (a %in% takes) {
        if (is.null(value)) {
          if (i == length(argv)) usage_error(a, " needs a value")
          i <- i + 1L
          value <- argv[[i]]
        }
        switch(a,
          "--fixtures" = opts$fixtures <- value,
          "--case" = opts$cases <- c(opts$cases, value),
          "--junit" = opts$junit <- value,
          "--json" = opts$json <- value,
          "--reporter" = opts$reporter <- value)
      } else if (a == "--strict") {
        opts$strict <- TRUE
      } else if (a %in% c("-h", "--help")) {
        opts$help <- TRUE
      } else if (startsWith(a, "-")) {
        usage_error("unknown option ", a, " (see --help)")
      } else {
        opts$ports <- c(opts$ports, a)
      }
      i <- i + 1L
    }
    if (!opts$help && !length(opts$ports)) usage_error("no port file given (see --help)")
    opts
  }

  # ------------------------------------------------------------------------------------------
  # The fixture index (attention_ports/fixtures/index.py describes the format)

  default_fixtures <- function(here) {
    for (d in c(file.path(here, "..", "..", "fixtures"))) {
      if (file.exists(file.path(d, "index.tsv"))) return(normalizePath(d))
    }
    usage_error("no fixtures found next to ", here, " (pass --fixtures DIR)")
  }

  read_index <- function(dir) {
    path <- file.path(dir, "index.tsv")
    if (!file.exists(path)) {
      usage_error(path, ": no fixture index (fixtures older than the native runners? ",
                  "regenerate with `attention-ports generate --out ", dir, "`)")
    }
    lines <- readLines(path, encoding = "UTF-8", warn = FALSE)
    lines <- lines[nzchar(lines) & !startsWith(lines, "#")]
    fields <- strsplit(lines, "\t", fixed = TRUE)
    if (!length(fields)) usage_error(path, ": not an attention-ports fixture index (empty)")
    kind <- vapply(fields, function(f) f[[1L]], "")
    head <- fields[[1L]]
    if (kind[[1L]] != "index" || length(head) != 5L) usage_error(path, ": not an attention-ports fixture index")
    if (head[[2L]] != INDEX_FORMAT || head[[3L]] != FIXTURE_FORMAT) {
      usage_error(path, ": index format ", head[[2L]], " of fixture format ", head[[3L]], "; this runner reads ",
                  "index format ", INDEX_FORMAT, " of fixture format ", FIXTURE_FORMAT,
                  " (use the runner shipped with these fixtures)")
    }
    manifest <- file.path(dir, "manifest.json")
    if (!file.exists(manifest) || unname(tools::md5sum(manifest)) != head[[5L]]) {
      usage_error(path, ": does not describe ", manifest, " (edited, or stale: run `attention-ports generate`)")
    }
    width <- c(precision = 2L, op = 4L, group = 4L, case = 3L, option = 5L, array = 11L)
    for (i in seq_along(fields)[-1L]) {
      if (is.na(width[kind[[i]]]) || length(fields[[i]]) != width[[kind[[i]]]]) {
        usage_error(path, ": malformed record: ", lines[[i]])
      }
    }
    for (f in fields[kind == "precision"]) {  # a precision tier's index (fixtures/index.py)
      if (f[[2L]] != "float64") {
        usage_error(path, ": these are the ", f[[2L]], " tier's fixtures; R computes in double only, so an R port ",
                    "is judged at float64, on the main fixtures folder (leave --fixtures out)")
      }
    }
    split_list <- function(s) if (identical(s, "-")) character() else strsplit(s, ",", fixed = TRUE)[[1L]]
    ops <- list()
    for (f in fields[kind == "op"]) {
      if (is.null(ops[[f[[2L]]]])) ops[[f[[2L]]]] <- list(name = f[[2L]], members = list())
      ops[[f[[2L]]]][[f[[3L]]]] <- split_list(f[[4L]])
    }
    for (f in fields[kind == "group"]) ops[[f[[2L]]]]$members[[f[[3L]]]] <- split_list(f[[4L]])
    cases <- list()
    for (f in fields[kind == "case"]) {
      if (is.null(ops[[f[[3L]]]])) usage_error(path, ": case ", f[[2L]], " has an unknown operation ", f[[3L]])
      cases[[f[[2L]]]] <- list(id = f[[2L]], op = f[[3L]], options = list(), arrays = list())
    }
    for (f in fields[kind == "option"]) {
      cases[[f[[2L]]]]$options[f[[3L]]] <- list(parse_option(f[[4L]], f[[5L]], split_list))
    }
    for (f in fields[kind == "array"]) {
      shape <- gsub("^\\[|\\]$", "", f[[8L]])
      a <- list(kind = f[[3L]], name = f[[4L]], convention = f[[5L]], layout = f[[6L]], dtype = f[[7L]],
                shape = as.integer(strsplit(shape, ",", fixed = TRUE)[[1L]]), file = f[[9L]], md5 = f[[11L]])
      cases[[f[[2L]]]]$arrays[[length(cases[[f[[2L]]]]$arrays) + 1L]] <- a
    }
    list(ops = ops, cases = cases, path = path)
  }

  # An option's value, typed as the Python adapter passes it (ints stay integers, floats doubles).
  parse_option <- function(type, value, split_list) {
    switch(type,
      "null" = NULL,
      "bool" = value == "true",
      "int" = as.integer(value),
      "float" = as.numeric(value),
      "str" = value,
      "strs" = split_list(value),
      usage_error("unknown option type ", type))
  }

  select_cases <- function(index, globs, dir) {
    ids <- names(index$cases)
    if (!length(globs)) return(index$cases)
    keep <- Reduce(`|`, lapply(globs, function(g) grepl(utils::glob2rx(g), ids)))
    if (!any(keep)) usage_error("no case in ", dir, " matches ", paste(globs, collapse = " or "))
    index$cases[keep]
  }

  # ------------------------------------------------------------------------------------------
  # Fixture arrays

  load_array <- function(dir, a) {
    path <- file.path(dir, a$file)
    if (!file.exists(path)) stop(path, ": file is missing", call. = FALSE)
    if (unname(tools::md5sum(path)) != a$md5) {
      stop(path, ": its checksum does not match the fixture index (corrupted or edited)", call. = FALSE)
    }
    x <- read_npy(path)
    want <- c(float64 = "double", int64 = "integer", bool = "logical")[[a$dtype]]
    if (typeof(x) != want || !identical(shape_of(x, length(a$shape)), a$shape)) {
      stop(sprintf("%s: holds %s %s, the index says %s %s", path, typeof(x), fmt_shape(shape_of(x, length(a$shape))),
                   a$dtype, fmt_shape(a$shape)), call. = FALSE)
    }
    x
  }

  # NumPy's shape of an R value read by read_npy (0-D and 1-D arrays come back as plain vectors).
  shape_of <- function(x, rank) {
    d <- dim(x)
    if (!is.null(d)) return(as.integer(d))
    if (rank == 0L && length(x) == 1L) integer() else length(x)
  }

  fmt_shape <- function(shape) {
    if (length(shape) == 1L) sprintf("(%d,)", shape) else sprintf("(%s)", paste(shape, collapse = ", "))
  }

  # The case's inputs, and per output its expected array and bound: the port's convention's file
  # where the case has one, else the fixtures' own.
  load_case <- function(dir, case, convention) {
    inputs <- list()
    expected <- list()
    for (a in case$arrays) {
      if (a$kind == "input") inputs[[a$name]] <- list(value = load_array(dir, a), layout = a$layout)
    }
    pick <- function(kind, name) {
      own <- Filter(function(a) a$kind == kind && a$name == name && a$convention == convention, case$arrays)
      if (length(own)) own[[1L]] else Filter(function(a) a$kind == kind && a$name == name && a$convention == "-",
                                             case$arrays)[[1L]]
    }
    names <- unique(vapply(Filter(function(a) a$kind == "expected", case$arrays), function(a) a$name, ""))
    for (name in names) {
      e <- pick("expected", name)
      expected[[name]] <- list(value = load_array(dir, e), bound = load_array(dir, pick("bound", name)),
                               layout = e$layout, shape = e$shape, convention = e$convention)
    }
    list(inputs = inputs, expected = expected)
  }

  # ------------------------------------------------------------------------------------------
  # The port: loaded and called through ports/r/worker.R, the Python R worker's own bridge

  load_port <- function(bridge, paths, op_names) {
    files <- unlist(lapply(paths, function(p) {
      if (dir.exists(p)) {
        found <- sort(list.files(p, pattern = "\\.R$", full.names = TRUE))
        if (!length(found)) usage_error("r: port directory ", normalizePath(p), " holds no *.R files")
        normalizePath(found)
      } else if (file.exists(p)) {
        normalizePath(p)
      } else {
        usage_error("r: port file ", p, " does not exist")
      }
    }))
    where <- if (length(files) == 1L) files[[1L]] else paste0(dirname(files[[1L]]), "/*.R")
    env <- bridge$.ap_port_env()
    loaded <- bridge$.ap_load(env, files)
    port <- list(env = env, files = files, where = where, failure = "", warnings = loaded[-1L],
                 declaration = list(present = FALSE, operations = NULL, masked_query = "zeros", rope_pairing = "halves"))
    if (nzchar(loaded[[1L]])) {
      port$failure <- paste0("r: cannot load port ", loaded[[1L]])
      return(port)
    }
    declared <- tryCatch(check_declaration(bridge$.ap_declaration(env), where, op_names),
                         error = function(e) e)
    if (inherits(declared, "error")) port$failure <- conditionMessage(declared) else port$declaration <- declared
    port
  }

  # attention_ports/runtimes/declaration.py, the same checks and messages for R's declaration.
  check_declaration <- function(raw, where, op_names) {
    if (is.null(raw)) return(list(present = FALSE, operations = NULL, masked_query = "zeros", rope_pairing = "halves"))
    quoted <- function(x) paste(sprintf("'%s'", x), collapse = ", ")
    kind <- function(x) {
      if (is.list(x) && length(x) && !is.null(names(x)) && all(nzchar(names(x)))) "a named list / NamedTuple"
      else if (is.atomic(x) || is.list(x)) sprintf("a vector of %d", length(x))
      else sprintf("a R %s", typeof(x))
    }
    if (!(is.list(raw) && !is.null(names(raw)) && all(nzchar(names(raw))))) {  # list() too, as in Python
      stop(sprintf(paste0("%s: attention_ports must be a named list / NamedTuple, like attention_ports <- ",
                          "list(operations = c(\"softmax\"), masked_query = \"zeros\"); got %s"), where, kind(raw)),
           call. = FALSE)
    }
    unknown <- setdiff(names(raw), FIELDS)
    if (length(unknown)) {
      stop(sprintf("%s: attention_ports has unknown field(s) %s; the fields are %s",
                   where, quoted(unknown), paste(FIELDS, collapse = ", ")), call. = FALSE)
    }
    operations <- NULL
    if ("operations" %in% names(raw)) {
      ops <- raw$operations
      if (!(is.character(ops) || (is.list(ops) && !length(ops)))) {
        stop(sprintf("%s: attention_ports$operations must be a vector of operation names; got %s",
                     where, kind(ops)), call. = FALSE)
      }
      bad <- setdiff(as.character(ops), op_names)
      if (length(bad)) {
        stop(sprintf("%s: attention_ports$operations names %s, not contract operation(s); the operations are %s",
                     where, quoted(bad), paste(op_names, collapse = ", ")), call. = FALSE)
      }
      operations <- unique(as.character(ops))
    }
    masked_query <- "zeros"
    if ("masked_query" %in% names(raw)) {
      mq <- raw$masked_query
      if (!is.character(mq) || length(mq) != 1L) {
        stop(sprintf("%s: attention_ports$masked_query must be one of %s; got %s",
                     where, quoted(MASKED_QUERY), kind(mq)), call. = FALSE)
      }
      if (!mq %in% MASKED_QUERY) {
        stop(sprintf("%s: attention_ports$masked_query = '%s' is not one of %s", where, mq, quoted(MASKED_QUERY)),
             call. = FALSE)
      }
      masked_query <- mq
    }
    if ("precision" %in% names(raw)) {  # declaration.py's _precision: R has only double
      p <- raw$precision
      if (!is.character(p) || length(p) != 1L) {
        stop(sprintf("%s: attention_ports$precision must be one of %s; got %s", where, quoted(PRECISIONS), kind(p)),
             call. = FALSE)
      }
      if (!p %in% PRECISIONS) {
        stop(sprintf("%s: attention_ports$precision = '%s' is not a precision; use one of %s", where, p,
                     quoted(PRECISIONS)), call. = FALSE)
      }
      if (p != "float64") {
        stop(sprintf(paste0("%s: attention_ports$precision = '%s': R computes in double only, so an R port is ",
                            "judged at float64 (a float64 port also passes the float32 tier); remove the field"),
                     where, p), call. = FALSE)
      }
    }
    rope_pairing <- "halves"
    if ("rope_pairing" %in% names(raw)) {
      rp <- raw$rope_pairing
      if (!is.character(rp) || length(rp) != 1L || !rp %in% PAIRINGS) {
        stop(sprintf("%s: attention_ports$rope_pairing must be one of %s; got %s", where, quoted(PAIRINGS),
                     if (is.character(rp) && length(rp) == 1L) sprintf("'%s'", rp) else kind(rp)), call. = FALSE)
      }
      rope_pairing <- rp
    }
    list(present = TRUE, operations = operations, masked_query = masked_query, rope_pairing = rope_pairing)
  }

  # attention_ports/spec/pairing.py's for_port: a port takes no `pairing` option; where a case's
  # pairing is not the one the port declares, the port gets x's features permuted into its own
  # pairing (exact) and its output is permuted back (`back`).
  for_port <- function(op, inputs, options, declared) {
    if (!op %in% PAIRING_OPS) return(list(inputs = inputs, options = options, back = NULL))
    want <- if (is.null(options$pairing)) PAIRINGS[[1L]] else options$pairing
    options$pairing <- NULL
    d <- ncol(inputs$x$value)
    if (want == declared || is.null(d) || d %% 2L != 0L) return(list(inputs = inputs, options = options, back = NULL))
    interleaved_to_halves <- c(seq(1L, d, by = 2L), seq(2L, d, by = 2L))
    src <- if (want == "interleaved") interleaved_to_halves else order(interleaved_to_halves)
    inputs$x$value <- inputs$x$value[, src, drop = FALSE]
    list(inputs = inputs, options = options, back = order(src))
  }

  # The call, as attention_ports/runtimes/r/adapter.py builds it and attention_ports/runtimes/r/worker.py encodes it for .ap_call:
  # required arrays positionally; each parameter group by name (a named list of its members);
  # positional options; present optional arrays and options by name. A logical mask becomes
  # additive (0 keeps, -Inf removes); class indices (layout "index") become 1-based.
  build_call <- function(spec, inputs, options) {
    entries <- spec$name
    header <- numeric()
    strs <- character()
    arrays <- list()
    add_array <- function(mode, name, input, member = "") {
      x <- input$value
      kind <- "A"
      if (is.logical(x)) {
        if (endsWith(if (nzchar(member)) member else name, "mask")) {
          x[] <- ifelse(x, 0, -Inf)
          storage.mode(x) <- "double"
        } else {
          kind <- "L"
        }
      } else if (is.integer(x)) {
        kind <- "I"
      }
      if (identical(input$layout, "index")) x <- x + 1L
      entries <<- c(entries, paste(kind, mode, name, member, sep = "\t"))
      arrays[[length(arrays) + 1L]] <<- x
    }
    add_option <- function(mode, name, value) {
      kind <- if (is.character(value)) "c" else if (is.logical(value)) "l" else if (is.integer(value)) "i" else "n"
      entries <<- c(entries, paste(kind, mode, name, "", sep = "\t"))
      header <<- c(header, length(value))
      if (kind == "c") strs <<- c(strs, value) else header <<- c(header, as.double(value))
    }
    for (n in spec$args) {
      if (is.null(inputs[[n]])) stop(sprintf("%s: required input '%s' is absent", spec$name, n), call. = FALSE)
      add_array("p", n, inputs[[n]])
    }
    for (g in spec$groups) {
      entries <- c(entries, paste("G", "g", g, "", sep = "\t"))
      for (m in spec$members[[g]]) {
        key <- paste(g, m, sep = ".")
        if (!is.null(inputs[[key]])) add_array("g", g, inputs[[key]], m)
      }
    }
    for (n in spec$positional_options) if (!is.null(options[[n]])) add_option("p", n, options[[n]])
    for (n in spec$kwargs) if (!is.null(inputs[[n]])) add_array("k", n, inputs[[n]])
    for (n in spec$options) if (!is.null(options[[n]])) add_option("k", n, options[[n]])
    list(entries = entries, header = if (length(header)) header else NULL,
         strs = if (length(strs)) strs else NULL, arrays = arrays)
  }

  # Call the port: list(status = "ok" | "missing" | "error", message, warnings, outputs).
  # outputs: name -> list(value, type, shape) as the Python R worker reads them.
  call_port <- function(bridge, port, spec, call) {
    # What the port prints goes with its failures, as in the Python suite (stdout only: R's
    # messages and warnings go to stderr, the bridge reports warnings itself).
    printed <- utils::capture.output(
      res <- do.call(bridge$.ap_call, c(list(port$env, call$entries, call$header, call$strs), call$arrays)))
    printed <- output_section(printed)
    text <- strsplit(paste0(res[[1L]], "\x1e"), "\x1e", fixed = TRUE)[[1L]]
    status <- text[[1L]]
    message <- text[[2L]]
    warns <- text[[3L]]
    if (status == "missing") return(list(status = "missing", message = sprintf("%s is not defined in %s", spec$name, port$where), printed = printed))
    if (status != "ok") {
      if (status == "error" && nzchar(text[[4L]])) {
        message <- paste0(message, "\nR call stack (innermost last):\n  ", gsub("\n", "\n  ", text[[4L]], fixed = TRUE))
      }
      if (nzchar(warns)) message <- paste0(message, "\nR warnings before the error:\n  ", gsub("\n", "\n  ", warns, fixed = TRUE))
      return(list(status = "error", message = paste0(spec$name, ": ", message, printed)))
    }
    names <- text[-(1:4)]
    # worker.R's .ap_pack header: c(the port's seconds, n outputs, per output type, ndim, dims)
    header <- as.integer(res[[2L]][-1L])
    outputs <- list()
    h <- 2L
    for (i in seq_len(header[[1L]])) {
      nd <- header[[h + 1L]]
      outputs[[i]] <- list(name = names[[i]], value = res[[2L + i]], type = header[[h]],
                           shape = header[seq_len(nd) + h + 1L])
      h <- h + 2L + nd
    }
    list(status = "ok", message = "", printed = printed, warnings = if (nzchar(warns)) strsplit(warns, "\n", fixed = TRUE)[[1L]] else character(),
         outputs = outputs)
  }

  # attention_ports/runtimes/supervisor.py's output_section: the last 8,000 characters of what was printed.
  output_section <- function(lines) {
    text <- sub("\n+$", "", sub("^\n+", "", paste(lines, collapse = "\n")))
    if (!nzchar(trimws(text))) return("")
    if (nchar(text) > 8000L) {
      text <- sprintf("[... %d earlier characters not shown ...]\n%s", nchar(text) - 8000L,
                      substring(text, nchar(text) - 7999L))
    }
    paste0("\n--- the port's output during this call (stdout) ---\n", text)
  }

  # attention_ports/runtimes/r/adapter.py's _name_outputs: a bare array is the single output; declared outputs must
  # be doubles; a length-1 result without dim takes the contract's shape (_length_one_shape: the
  # same-named input's when that is 0-D or 1-D, else 1-D for a layout with axes, 0-D for a scalar,
  # an index or an undeclared output), a scalar is 0-D; an absent output is left out (run_case
  # fails it, and judges the others), but none at all is an error. `given`: the inputs' shapes.
  name_outputs <- function(spec, outputs, layouts, given) {
    if (length(outputs) == 1L && outputs[[1L]]$name == "") {
      if (length(spec$outputs) != 1L) {
        stop(sprintf("%s: returned a bare array; expected list(%s)", spec$name,
                     paste0(spec$outputs, " = ...", collapse = ", ")), call. = FALSE)
      }
      outputs[[1L]]$name <- spec$outputs[[1L]]
    }
    out <- list()
    for (o in outputs) {
      layout <- layouts[[o$name]]
      declared <- o$name %in% spec$outputs || sub("\\..*$", "", o$name) %in% spec$outputs
      if (o$type != 0L && declared && !identical(layout, "index")) {
        stop(sprintf("%s: output '%s' is an R %s vector; the contract wants doubles (numeric): return as.double(...)",
                     spec$name, o$name, if (o$type == 2L) "logical" else "integer"), call. = FALSE)
      }
      value <- as.double(o$value)
      shape <- o$shape
      if (!length(shape)) {
        g <- given[[o$name]]
        if (!is.null(g) && length(g) <= 1L && prod(g) == 1L) shape <- g
        else if (!is.null(layout) && !layout %in% c("scalar", "index")) shape <- 1L
      } else if (identical(layout, "scalar") && length(value) == 1L) shape <- integer()
      if (identical(layout, "index")) value <- value - 1
      out[[o$name]] <- list(value = value, shape = as.integer(shape))
    }
    present <- Filter(function(o) !is.null(out[[o]]) || any(startsWith(names(out), paste0(o, "."))), spec$outputs)
    if (!length(present)) {
      stop(sprintf("%s: the result holds none of its outputs (it has: %s); expected list(%s)", spec$name,
                   if (length(outputs)) paste(vapply(outputs, function(o) o$name, ""), collapse = ", ") else "nothing",
                   paste0(spec$outputs, " = ...", collapse = ", ")), call. = FALSE)
    }
    out
  }

  # ------------------------------------------------------------------------------------------
  # The comparison rule (attention_ports/judge/compare.py)

  # NumPy's spacing(x) for finite x >= 0: the distance to the next larger double.
  spacing <- function(x) {
    out <- rep(2^-1074, length(x))
    big <- x >= 2^-1022
    if (any(big)) {
      e <- floor(log2(x[big]))
      p <- 2^e
      e <- e - (p > x[big]) + (2 * p <= x[big])  # log2 may round across a power of two
      out[big] <- 2^(e - 52)
    }
    out
  }

  fmt3 <- function(x) {
    s <- sprintf("%.3g", x)
    s[is.nan(x)] <- "nan"
    s[!is.nan(x) & x == Inf] <- "inf"
    s[!is.nan(x) & x == -Inf] <- "-inf"
    s
  }

  # The shortest decimal that reads back as x (Python's repr of a float, in R's notation).
  shortest <- function(x) {
    if (is.nan(x)) return("nan")
    if (is.infinite(x)) return(if (x > 0) "inf" else "-inf")
    for (d in 1:17) {
      s <- sprintf("%.*g", d, x)
      if (as.numeric(s) == x) break
    }
    if (x == 0 && 1 / x < 0) "-0" else s
  }

  # expected, actual, bound: doubles in R's column-major order over the same shape `dims`.
  compare_arrays <- function(e, a, b, dims) {
    nan_e <- is.nan(e)
    nan_a <- is.nan(a)
    fin_e <- is.finite(e)
    fin_a <- is.finite(a)
    matched <- (nan_e & nan_a) | (is.infinite(e) & is.infinite(a) & a == e)
    diff <- ifelse(fin_e & fin_a, abs(a - e), Inf)
    diff[matched] <- 0
    bad <- !matched & !(fin_e & fin_a & diff <= b)
    frac <- ifelse(b > 0, diff / ifelse(b > 0, b, 1), ifelse(diff > 0, Inf, 0))
    resolved <- fin_e & abs(e) > b & e != 0
    mag <- ifelse(resolved, abs(e), 1)
    rel <- ifelse(resolved, diff / mag, 0)
    ulp <- ifelse(resolved, diff / spacing(mag), 0)
    top <- function(x) if (length(x)) max(x) else 0
    res <- list(ok = !any(bad), mismatches = sum(bad), total = length(e), max_abs_err = top(diff),
                max_rel_err = top(rel), max_ulp_err = top(ulp), max_err_over_bound = top(frac),
                worst = NULL, nan_only_expected = which(nan_e & !nan_a), nan_only_actual = which(nan_a & !nan_e))
    if (any(bad)) {
      # The worst element, ties broken as NumPy does (the first in C order of the same logical array).
      score <- ifelse(bad, frac, -1)
      c_order <- if (length(dims) >= 2L) as.vector(aperm(array(seq_along(score), dims))) else seq_along(score)
      res$worst <- c_order[[which.max(score[c_order])]]
    }
    res
  }

  # 1-based indices of the element at column-major position k of an array of shape `dims`.
  index_text <- function(k, dims) {
    idx <- if (length(dims) >= 2L) as.vector(arrayInd(k, dims)) else if (length(dims) == 1L) k else integer()
    sprintf("[%s]", paste(idx, collapse = ", "))
  }

  positions_text <- function(ks, dims) {
    if (length(dims) >= 2L) ks <- ks[order(match(ks, as.vector(aperm(array(seq_len(prod(dims)), dims)))))]  # C order
    shown <- vapply(utils::head(ks, 5L), index_text, "", dims = dims)
    more <- length(ks) - 5L
    paste0(paste(shown, collapse = ", "), if (more > 0L) sprintf(" and %d more", more) else "")
  }

  # compare.Comparison.describe, with the indices of the R result (1-based).
  describe <- function(case_id, output, cmp, e, a, b, dims) {
    head <- sprintf("case '%s', output '%s'", case_id, output)
    pct <- 100 * cmp$mismatches / max(cmp$total, 1L)
    lines <- sprintf("%s: %d of %d elements (%.1f%%) differ beyond their error bounds", head, cmp$mismatches,
                     cmp$total, pct)
    if (!is.null(cmp$worst)) {
      k <- cmp$worst
      ev <- e[[k]]
      av <- a[[k]]
      bv <- b[[k]]
      abs_err <- abs(av - ev)
      rel <- if (is.nan(ev) || ev != 0) abs_err / abs(ev) else Inf
      ulps <- if (is.finite(ev)) abs_err / spacing(abs(ev)) else Inf
      frac <- if (bv > 0) abs_err / bv else Inf
      lines <- c(lines, sprintf("  worst at %s (1-based): expected %s, actual %s, bound %s (abs err %s, rel err %s, %s ulps, %s x bound)",
                                index_text(k, dims), shortest(ev), shortest(av), fmt3(bv), fmt3(abs_err), fmt3(rel),
                                fmt3(ulps), fmt3(frac)))
    }
    lines <- c(lines, sprintf("  max abs err %s, max rel err %s, max %s ulps, worst %s x bound", fmt3(cmp$max_abs_err),
                              fmt3(cmp$max_rel_err), fmt3(cmp$max_ulp_err), fmt3(cmp$max_err_over_bound)))
    if (length(cmp$nan_only_expected)) {
      lines <- c(lines, paste("  NaN expected but not found at", positions_text(cmp$nan_only_expected, dims)))
    }
    if (length(cmp$nan_only_actual)) {
      lines <- c(lines, paste("  NaN found but not expected at", positions_text(cmp$nan_only_actual, dims)))
    }
    paste(lines, collapse = "\n")
  }

  # ------------------------------------------------------------------------------------------
  # One case

  result <- function(case, output, status, message = "", cmp = NULL) {
    list(case = case$id, op = case$op, output = output, status = status, message = message,
         max_abs_err = cmp$max_abs_err, max_rel_err = cmp$max_rel_err, max_ulp_err = cmp$max_ulp_err,
         err_over_bound = cmp$max_err_over_bound)
  }

  load_failure_shown <- ""  # the case that carries the port's load error (printed once, not per case)

  run_case <- function(dir, index, bridge, port, case) {
    spec <- index$ops[[case$op]]
    output_names <- unique(vapply(Filter(function(a) a$kind == "expected", case$arrays), function(a) a$name, ""))
    every <- function(status, message) lapply(output_names, function(o) result(case, o, status, message))
    fixture <- tryCatch(load_case(dir, case, port$declaration$masked_query), error = function(e) e)
    if (inherits(fixture, "error")) return(list(outputs = every("error", sprintf("case '%s': fixture error: %s", case$id, conditionMessage(fixture)))))
    if (nzchar(port$failure)) {  # the load error whole on the first case, a pointer to it on the others
      if (!nzchar(load_failure_shown)) {
        load_failure_shown <<- case$id
        return(list(outputs = every("error", port$failure)))
      }
      return(list(outputs = every("error", sprintf("r: the port %s did not load: its error is in case '%s'",
                                                   port$where, load_failure_shown))))
    }
    declared <- port$declaration$operations
    if (!is.null(declared) && !case$op %in% declared) {
      return(list(outputs = every("missing", sprintf("case '%s': %s is not among the operations %s declares (attention_ports)",
                                                      case$id, case$op, port$where))))
    }
    called <- tryCatch({
      call <- for_port(case$op, fixture$inputs, case$options, port$declaration$rope_pairing)
      reply <- call_port(bridge, port, spec, build_call(spec, call$inputs, call$options))
      if (reply$status == "ok") {
        layouts <- lapply(fixture$expected, function(x) x$layout)
        given <- list()  # the index's shapes: a 0-D input is integer(0) there, not length 1
        for (a in case$arrays) if (a$kind == "input") given[[a$name]] <- a$shape
        reply$actual <- name_outputs(spec, reply$outputs, layouts, given)
        y <- reply$actual$output
        if (!is.null(call$back) && !is.null(y) && length(y$shape) == 2L && y$shape[[2L]] == length(call$back)) {
          m <- array(y$value, dim = y$shape)
          reply$actual$output$value <- m[, call$back, drop = FALSE]
        }
      }
      reply
    }, error = function(e) list(status = "error", message = conditionMessage(e)))
    if (called$status == "missing") {
      if (is.null(declared)) return(list(outputs = every("missing", sprintf("case '%s': %s", case$id, called$message))))
      called <- list(status = "error", message = sprintf("%s is declared in attention_ports$operations of %s but the port defines no %s",
                                                          case$op, port$where, case$op))
    }
    if (called$status != "ok") return(list(outputs = every("error", sprintf("case '%s': r raised: %s", case$id, called$message))))
    outputs <- list()
    for (name in output_names) {
      exp <- fixture$expected[[name]]
      act <- called$actual[[name]]
      if (is.null(act)) {
        outputs[[name]] <- result(case, name, "fail", sprintf("case '%s', output '%s': not returned (returned: %s)",
                                                             case$id, name, paste(sort(names(called$actual)), collapse = ", ")))
        next
      }
      if (!identical(act$shape, exp$shape)) {
        outputs[[name]] <- result(case, name, "fail", sprintf("case '%s', output '%s': shape mismatch: expected %s, actual %s",
                                                             case$id, name, fmt_shape(exp$shape), fmt_shape(act$shape)))
        next
      }
      e <- as.double(exp$value)
      b <- as.double(exp$bound)
      cmp <- compare_arrays(e, act$value, b, exp$shape)
      outputs[[name]] <- result(case, name, if (cmp$ok) "pass" else "fail",
                                if (cmp$ok) "" else describe(case$id, name, cmp, e, act$value, b, exp$shape), cmp)
    }
    for (i in seq_along(outputs)) {  # what the port printed helps read its wrong numbers
      if (outputs[[i]]$status == "fail") outputs[[i]]$message <- paste0(outputs[[i]]$message, called$printed)
    }
    list(outputs = unname(outputs), warnings = called$warnings)
  }

  case_status <- function(outputs) {
    statuses <- vapply(outputs, function(o) o$status, "")
    if (!length(statuses)) "error" else OUTCOMES[[max(match(statuses, OUTCOMES))]]
  }

  # ------------------------------------------------------------------------------------------
  # Reports: testthat, JUnit XML, JSON (the `verify --json` schema)

  report_testthat <- function(case, res, strict) {
    testthat::test_that(case$id, {
      for (w in res$warnings) warning(sprintf("%s: %s", case$op, w), call. = FALSE)
      status <- case_status(res$outputs)
      if (status == "missing" && strict) {  # the framework's own summary shows what fails the run
        testthat::expect(FALSE, paste0(res$outputs[[1L]]$message, " (--strict: a missing operation fails)"))
        return(invisible())
      }
      if (status == "missing") testthat::skip(res$outputs[[1L]]$message)
      if (status == "error") {  # the port raised (or the case could not run): once, not per output
        testthat::expect(FALSE, paste(unique(vapply(res$outputs, function(o) o$message, "")), collapse = "\n"))
        return(invisible())
      }
      for (o in res$outputs) {
        testthat::expect(o$status == "pass", if (nzchar(o$message)) o$message else sprintf("%s: %s", o$output, o$status))
      }
    })
  }

  xml_escape <- function(s) {
    s <- gsub("[\x01-\x08\x0b\x0c\x0e-\x1f]", "?", s, useBytes = TRUE)
    s <- gsub("&", "&amp;", s, fixed = TRUE)
    s <- gsub("<", "&lt;", s, fixed = TRUE)
    s <- gsub(">", "&gt;", s, fixed = TRUE)
    gsub("\"", "&quot;", s, fixed = TRUE)
  }

  junit_xml <- function(runs, port_where, seconds, strict) {
    count <- function(rs, what) sum(vapply(rs, function(r) case_status(r$res$outputs) %in% what, TRUE))
    # A missing case is skipped, or a failure under --strict (as `verify --junit` writes it).
    failing <- c("fail", if (strict) "missing")
    skipping <- if (strict) character() else "missing"
    ops <- unique(vapply(runs, function(r) r$case$op, ""))
    out <- c('<?xml version="1.0" encoding="UTF-8"?>',
             sprintf('<testsuites name="attention-ports conformance (r)" tests="%d" failures="%d" errors="%d" skipped="%d" time="%.3f">',
                     length(runs), count(runs, failing), count(runs, "error"), count(runs, skipping), seconds))
    for (op in ops) {
      rs <- Filter(function(r) r$case$op == op, runs)
      out <- c(out, sprintf('  <testsuite name="r.%s" tests="%d" failures="%d" errors="%d" skipped="%d" time="%.3f">',
                            op, length(rs), count(rs, failing), count(rs, "error"), count(rs, skipping),
                            sum(vapply(rs, function(r) r$seconds, 0))),
               sprintf('    <properties><property name="port" value="%s"/></properties>', xml_escape(port_where)))
      for (r in rs) {
        status <- case_status(r$res$outputs)
        out <- c(out, sprintf('    <testcase classname="r.%s" name="%s" time="%.3f">', op, r$case$id, r$seconds))
        bad <- Filter(function(o) o$status != "pass", r$res$outputs)
        text <- xml_escape(paste(unique(vapply(bad, function(o) o$message, "")), collapse = "\n"))
        first <- xml_escape(sub("\n.*", "", if (length(bad)) bad[[1L]]$message else ""))
        tag <- c(fail = "failure", error = "error", missing = if (strict) "failure" else "skipped")[status]
        if (!is.na(tag)) {
          out <- c(out, sprintf('      <%s message="%s" type="%s">%s</%s>', tag, first, status, text, tag))
        }
        out <- c(out, "    </testcase>")
      }
      out <- c(out, "  </testsuite>")
    }
    c(out, "</testsuites>")
  }

  json_string <- function(s) {
    s <- gsub("\\", "\\\\", s, fixed = TRUE)
    s <- gsub("\"", "\\\"", s, fixed = TRUE)
    s <- gsub("\n", "\\n", s, fixed = TRUE)
    s <- gsub("\t", "\\t", s, fixed = TRUE)
    s <- gsub("\r", "\\r", s, fixed = TRUE)
    s <- gsub("[\x01-\x08\x0b\x0c\x0e-\x1f]", "?", s, useBytes = TRUE)
    paste0("\"", s, "\"")
  }

  json_number <- function(x) {
    if (is.null(x)) "null" else if (is.finite(x)) sprintf("%.17g", x) else json_string(fmt3(x))
  }

  results_json <- function(runs, port_where, convention) {
    rows <- unlist(lapply(runs, function(r) vapply(r$res$outputs, function(o) {
      sprintf('  {"impl": "r", "case": %s, "output": %s, "status": %s, "max_abs_err": %s, "max_rel_err": %s, "max_ulp_err": %s, "err_over_bound": %s, "message": %s}',
              json_string(o$case), json_string(o$output), json_string(o$status), json_number(o$max_abs_err),
              json_number(o$max_rel_err), json_number(o$max_ulp_err), json_number(o$err_over_bound),
              json_string(o$message))
    }, "")))
    c("{", '"version": 2,', sprintf('"meta": {"runner": "ports/r/conformance.R", "port": %s, "masked_query": %s, "R": %s},',
                                    json_string(port_where), json_string(convention), json_string(R.version.string)),
      '"results": [', paste(rows, collapse = ",\n"), "]", "}")
  }

  write_atomically <- function(path, lines) {
    tmp <- tempfile(pattern = paste0(".", basename(path), "."), tmpdir = dirname(path))
    con <- file(tmp, "wb")
    writeBin(charToRaw(enc2utf8(paste0(paste(lines, collapse = "\n"), "\n"))), con)
    close(con)
    if (!file.rename(tmp, path)) {
      unlink(tmp)
      stop("cannot write ", path, call. = FALSE)
    }
  }

  # ------------------------------------------------------------------------------------------

  HELP <- paste(
    "usage: Rscript conformance.R [--fixtures DIR] [--case GLOB]... [--junit FILE] [--json FILE]",
    "                             [--reporter NAME] [--strict] PORT.R [MORE.R | DIR]...",
    "Judges an R port against the attention-ports fixtures (see the comment at the top of this file).",
    sep = "\n")

  main <- function(argv, here) {
    opts <- parse_args(argv)
    if (opts$help) {
      cat(HELP, "\n")
      return(0L)
    }
    if (!requireNamespace("testthat", quietly = TRUE)) {
      usage_error("testthat is not installed (install.packages(\"testthat\"); Debian: apt-get install r-cran-testthat)")
    }
    # Outside a package testthat looks for a DESCRIPTION (and fails expensively) at every
    # test_that() to learn its edition: ~50 ms a case. Say it once.
    testthat::local_edition(3L)
    # The progress and summary reporters give up after 10 failures by default; a port's run
    # reports them all.
    if (is.null(getOption("testthat.progress.max_fails"))) options(testthat.progress.max_fails = Inf)
    if (is.null(getOption("testthat.summary.max_reports"))) options(testthat.summary.max_reports = Inf)
    # "progress" -> testthat::ProgressReporter, "check" -> CheckReporter, ...
    class_name <- paste0(toupper(substr(opts$reporter, 1L, 1L)), substring(opts$reporter, 2L), "Reporter")
    cls <- tryCatch(getExportedValue("testthat", class_name), error = function(e) {
      usage_error("--reporter ", opts$reporter, ": testthat has no ", class_name)
    })
    reporter <- if ("show_praise" %in% names(formals(cls$public_methods$initialize))) cls$new(show_praise = FALSE) else cls$new()
    dir <- if (is.null(opts$fixtures)) default_fixtures(here) else normalizePath(opts$fixtures, mustWork = FALSE)
    if (!dir.exists(dir)) usage_error("--fixtures ", opts$fixtures, ": no such folder")
    index <- read_index(dir)
    cases <- select_cases(index, opts$cases, dir)
    cases <- cases[order(match(vapply(cases, function(c) c$op, ""), names(index$ops)))]  # one context per operation
    bridge <- new.env(parent = baseenv())
    sys.source(file.path(here, "worker.R"), envir = bridge)
    reader <- new.env(parent = baseenv())
    sys.source(file.path(dir, "readers", "read_npy.R"), envir = reader)
    assign("read_npy", reader$read_npy, envir = .conformance)
    port <- load_port(bridge, opts$ports, names(index$ops))
    for (w in port$warnings) message("r: loading ", w)
    cat(sprintf("r conformance: port %s (%s), %d case(s) from %s\n", port$where,
                if (port$declaration$present) sprintf("masked_query = %s", port$declaration$masked_query) else "no declaration",
                length(cases), dir))
    load_failure_shown <<- ""  # (a load error is printed with the first case, once)
    runs <- list()
    started <- Sys.time()
    close_file <- function() {  # as testthat::test_dir ends a file
      if (is.function(reporter$end_context_if_started)) reporter$end_context_if_started()
      reporter$end_file()
    }
    testthat::with_reporter(reporter, start_end_reporter = TRUE, {
      current <- ""
      for (case in cases) {
        if (case$op != current) {
          if (nzchar(current)) close_file()
          current <- case$op
          reporter$start_file(current)
        }
        t0 <- Sys.time()
        res <- run_case(dir, index, bridge, port, case)
        runs[[length(runs) + 1L]] <- list(case = case, res = res, seconds = as.numeric(Sys.time() - t0, units = "secs"))
        report_testthat(case, res, opts$strict)
      }
      if (nzchar(current)) close_file()
    })
    seconds <- as.numeric(Sys.time() - started, units = "secs")
    statuses <- vapply(runs, function(r) case_status(r$res$outputs), "")
    if (!is.null(opts$junit)) write_atomically(opts$junit, junit_xml(runs, port$where, seconds, opts$strict))
    if (!is.null(opts$json)) write_atomically(opts$json, results_json(runs, port$where, port$declaration$masked_query))
    # Each case counted once, as `verify` counts it; --strict makes a missing case fail the run,
    # it does not count it twice.
    failed <- sum(statuses %in% c("fail", "error"))
    missing <- sum(statuses == "missing")
    passed <- sum(statuses == "pass")
    cat(sprintf("r conformance: %d passed, %d failed, %d missing%s (%.1f s)\n", passed, failed,
                missing, if (opts$strict && missing > 0L) ", failing under --strict" else "", seconds))
    # As `verify` and the pytest plugin: under CI=true a run that passed nothing is not green.
    zero <- tolower(Sys.getenv("CI")) %in% c("1", "true", "yes") && length(runs) > 0L && passed == 0L
    if (zero) cat("CI: no case passed: refusing to call this run green\n")
    if (failed > 0L || (opts$strict && missing > 0L) || zero) 1L else 0L
  }
})

if (sys.nframe() == 0L) {
  .here <- local({
    file_arg <- grep("^--file=", commandArgs(trailingOnly = FALSE), value = TRUE)
    if (length(file_arg)) dirname(normalizePath(sub("^--file=", "", file_arg[[1L]]))) else getwd()
  })
  .status <- tryCatch(.conformance$main(commandArgs(trailingOnly = TRUE), .here),
    usage_error = function(e) {
      message("r conformance: ", conditionMessage(e))
      2L
    },
    error = function(e) {
      message("r conformance: internal error: ", conditionMessage(e))
      3L
    })
  quit(save = "no", status = .status)
}
