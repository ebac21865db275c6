"""The R implementation: runs an R port (ours, or a user's file) inside an embedded R via rpy2.

One embedded R per process (R cannot be restarted in-process), started on first use. Every
``RImplementation`` loads its port into its own fresh environment (``new.env(parent = globalenv())``),
so two ports in one process (ours and a user's) never see each other's functions, and an operation
is looked up only among the functions the port file itself defines.

Calls are generic, driven by :mod:`attention_ports.ops`: positional arrays in ``spec.args`` order,
then each of ``spec.groups`` by name as an R named list of its members present in the inputs
(``"params.w_q"`` -> ``params$w_q``), then ``spec.positional_options`` positionally, then present
optional arrays and options by name: ``classifier_step(x_emb, label, params = params, lr, frozen =
frozen)``. Scalars: int -> R integer, float -> double, bool -> logical, str -> character, a list of
str -> a character vector (``character(0)`` when empty). Arrays keep their logical shape (``dim`` =
numpy shape; 1-D -> plain vector, 0-D -> length-1 vector); integer arrays -> R integer, boolean
masks -> additive 0/-Inf doubles, other booleans -> logical; arrays whose role is ``Role.INDEX``
(class labels) travel 1-based, value + 1 (and come back - 1). Results: a named list, nested lists
flattened to ``"outer.inner"``; a bare array is the single declared output; integer/logical -> float64;
length-1 results without ``dim`` are 0-D (1-D where the op declares a vector role).

Conversion (no ``memoryview()``, no rpy2 conversion layer): each array becomes one freshly
allocated R double vector whose memory numpy writes column-major directly (``np.frombuffer`` over
``REAL()``, one strided copy whatever the array's own layout), with ``dim`` set from Python to the
numpy shape; results come back the same way (one copy out of ``REAL()``, ``order="F"``). Argument
kinds/names travel as one cached character vector per call signature, scalars in one small double
vector. An R support function (its own environment, parent ``baseenv()``) binds the arguments in a
frame, evaluates the cached call ``op(x, ..., name = name)`` inside ``tryCatch``/``withCallingHandlers``,
flattens the result and returns it. Measured (2 cores, shared box): a round trip through an
identity port costs ~120-200 us; 3 arrays of 256x64 in and 2 out ~0.35 ms. For comparison, rpy2's
numpy2ri converter (held context) cost ~290 us for the small call, and packing all arrays into one
R vector cost 1.4 ms at 256x64 (R-side subsetting copies). test_many_small_calls prints the figure.

Errors: an R error becomes :class:`ImplementationError` with R's own text, ``Error in <deparsed
conditionCall> : <conditionMessage>``, followed by the R call stack from the port's entry point down
and any R warnings raised before it. R warnings of a successful call are not lost: each is re-issued
as a Python :class:`RWarning` (``warnings.warn``) and kept in ``last_warnings``. Output the port
prints (``print``, ``cat``, ``message``) goes to Python's stderr, never stdout.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports import ops
from attention_ports.impl import (
    Arrays,
    Implementation,
    ImplementationError,
    ImplementationUnavailable,
    OperationMissing,
)

PORT_DIR = Path(__file__).resolve().parent / "r" / "R"

_INT32_MAX = 2**31 - 1
_LOCK = threading.RLock()  # embedded R is single-threaded: one call at a time per process
_R: _EmbeddedR | None = None


class RWarning(UserWarning):
    """An R warning raised by a port during a call that otherwise succeeded."""


# R side of the bridge. Lives in its own environment (parent: baseenv()), never in globalenv().
_SUPPORT_R = r"""
local({
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

  # The calls from the port's entry point down to the one that signalled, one line each.
  .ap_traceback <- function(calls, call) {
    if (is.null(calls)) return("")
    start <- Position(function(cl) identical(cl, call), calls, nomatch = 1L)
    calls <- calls[start:length(calls)]
    calls <- calls[-length(calls)]  # the calling handler itself
    n <- length(calls)
    keep <- if (n > 20L) c(1:5, (n - 9L):n) else seq_len(n)  # deep recursion: both ends only
    heads <- vapply(calls[keep], function(cl) {
      s <- deparse(cl, width.cutoff = 100L, nlines = 1L)[1L]
      if (nchar(s) > 100L) paste0(substr(s, 1L, 97L), "...") else s
    }, "")
    if (n > 20L) heads <- c(heads[1:5], sprintf("... %d more calls ...", n - 15L), heads[6:15])
    heads <- heads[!startsWith(heads, ".handleSimpleError(")]
    paste(heads, collapse = "\n")
  }

  # What a call signature (op name + entries) means, parsed once and cached: per argument its
  # kind, mode (p positional, k keyword, g group), name and group member, and the call to evaluate,
  # e.g. softmax(x) or scaled_dot_product_attention(q, k, v, mask = mask): symbols, so that an
  # error's deparsed call stays short.
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

  # Named list of numeric/logical leaves; nested lists become "outer.inner".
  .ap_flatten <- function(value, name = "") {
    if (is.list(value)) {
      nms <- names(value)
      where <- if (nzchar(name)) sprintf(" in element '%s'", name) else ""
      if (length(value) > 0L && (is.null(nms) || any(is.na(nms) | !nzchar(nms)))) {
        stop(sprintf(paste0("returned a list with unnamed elements%s; name every element, ",
                            "e.g. list(output = ..., weights = ...)"), where), call. = FALSE)
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
    structure(list(value), names = name)
  }

  # list(header, values...): header = c(n outputs, per output ndim and dims); each value a double
  # vector (doubles pass as they are: no copy).
  .ap_pack <- function(flat) {
    header <- length(flat)
    for (v in flat) {
      d <- dim(v)
      if (is.null(d)) d <- if (length(v) == 1L) integer() else length(v)
      header <- c(header, length(d), d)
    }
    c(list(as.double(header)), lapply(unname(flat), function(v) if (is.double(v)) v else as.double(v)))
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
    warns <- paste(warns, collapse = "\n")
    if (!res$ok) {
      text <- c("error", .ap_condition_text("Error", res$cond), warns, .ap_traceback(calls, call))
      return(list(paste(text, collapse = "\x1e")))
    }
    flat <- tryCatch(.ap_flatten(res$value), error = function(e) e)
    if (inherits(flat, "error")) {
      return(list(paste(c("badresult", conditionMessage(flat), warns, ""), collapse = "\x1e")))
    }
    c(list(paste(c("ok", "", warns, "", names(flat)), collapse = "\x1e")), .ap_pack(flat))
  }

  # Source every file into env (quit()/q() disabled first: they would end the Python process).
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

  environment()
}, envir = new.env(parent = baseenv()))
"""


class _EmbeddedR:
    """The process's embedded R, the support functions, and the raw-memory copy helpers."""

    def __init__(self) -> None:
        try:
            import rpy2.situation
        except Exception as exc:
            raise ImplementationUnavailable(
                f"r: cannot import rpy2 ({type(exc).__name__}: {exc}); run scripts/install_r.sh"
            ) from exc
        # A wrong R_HOME makes R's initialisation exit() the whole process ("unable to open the base
        # package"): check it first, while it can still be reported.
        r_home = rpy2.situation.get_r_home()
        if not r_home or not os.path.isdir(os.path.join(r_home, "library", "base")):
            raise ImplementationUnavailable(
                f"r: no usable R installation (R_HOME={r_home!r} has no library/base); "
                "install R (scripts/install_r.sh) or fix R_HOME"
            )
        try:
            import rpy2.rinterface as ri
            from rpy2.rinterface_lib import callbacks, embedded, openrlib
        except Exception as exc:  # ImportError, or OSError / undefined symbol from a mismatched libR
            raise ImplementationUnavailable(
                f"r: cannot import rpy2 ({type(exc).__name__}: {exc}); run scripts/install_r.sh"
            ) from exc
        # Starting R writes LD_LIBRARY_PATH (R's lib dir and the system's) into os.environ. Every
        # child process would inherit it: a pyenv python then loads the system libpython, a julia
        # worker the system's libraries instead of its own. The dynamic loader read this process's
        # value at start-up, so restoring it costs R nothing.
        saved = os.environ.get("LD_LIBRARY_PATH")
        try:
            if not embedded.isready():
                ri.initr_simple()
        except Exception as exc:
            raise ImplementationUnavailable(f"r: cannot start the embedded R: {exc}") from exc
        finally:
            if saved is None:
                os.environ.pop("LD_LIBRARY_PATH", None)
            else:
                os.environ["LD_LIBRARY_PATH"] = saved
        # R's stdout (print/cat in a port) would otherwise land on Python's stdout, among reports.
        callbacks.consolewrite_print = _write_stderr
        self.ri = ri
        self.ffi = openrlib.ffi
        self.REAL = openrlib.rlib.REAL
        support = ri.evalr(_SUPPORT_R)
        self.call = support.find(".ap_call")
        self.load = support.find(".ap_load")
        self.new_env = ri.baseenv.find("new.env")
        self.version = str(ri.evalr("R.version.string")[0])
        self._strs: dict[tuple[str, ...], Any] = {}
        self._dims: dict[tuple[int, ...], Any] = {}

    def strs(self, values: tuple[str, ...]) -> Any:
        """An R character vector, cached: call signatures repeat, their names need building once."""
        vec = self._strs.get(values)
        if vec is None:
            vec = self.ri.StrSexpVector.from_iterable(values)
            if len(self._strs) < 4096:
                self._strs[values] = vec
        return vec

    def to_r(self, arr: np.ndarray) -> Any:
        """A new R double vector with ``arr``'s logical shape: its data written column-major straight
        into R's memory (one strided copy, whatever ``arr``'s own layout), ``dim`` set when 2-D+."""
        ffi, real, n = self.ffi, self.REAL, arr.size

        def populate(_iterable: Any, r_vector: Any, _set_elt: Any, _cast: Any) -> None:
            if n:
                dest = np.frombuffer(ffi.buffer(real(r_vector), n * 8), dtype=np.float64)
                np.copyto(dest.reshape(arr.shape, order="F"), arr, casting="unsafe")

        vec = self.ri.FloatSexpVector.from_iterable(range(n), populate_func=populate)
        if arr.ndim >= 2:
            dim = self._dims.get(arr.shape)
            if dim is None:
                dim = self.ri.IntSexpVector.from_iterable(arr.shape)
                if len(self._dims) < 4096:
                    self._dims[arr.shape] = dim
            vec.do_slot_assign("dim", dim)
        return vec

    def from_r(self, vec: Any, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A numpy copy of an R double vector's data (``vec`` stays referenced while copying),
        read column-major into ``shape``."""
        n = len(vec)
        if n:
            data = np.frombuffer(self.ffi.buffer(self.REAL(vec.__sexp__._cdata), n * 8), dtype=np.float64)
        else:
            data = np.empty(0)
        if shape is None:
            return data.copy()
        return data.reshape(shape, order="F").copy(order="K")  # keeps R's column-major layout


def _write_stderr(s: str) -> None:
    sys.stderr.write(s)
    sys.stderr.flush()


def _embedded_r() -> _EmbeddedR:
    global _R
    with _LOCK:
        if _R is None:
            _R = _EmbeddedR()
        return _R


def _port_files(port: Path | None) -> list[Path]:
    if port is None:
        files = sorted(PORT_DIR.glob("*.R"))
        if not files:
            raise ImplementationUnavailable(f"r: no *.R files in {PORT_DIR}")
        return files
    port = Path(port)
    if port.is_dir():
        files = sorted(port.glob("*.R"))
        if not files:
            raise ImplementationUnavailable(f"r: port directory {port} holds no *.R files")
        return files
    if not port.is_file():
        raise ImplementationUnavailable(f"r: port file {port} does not exist")
    return [port]


class _Call:
    """One call's arguments: entry strings (what each argument is), arrays, scalar values."""

    def __init__(self, op: str) -> None:
        self.entries: list[str] = [op]
        self.header: list[float] = []  # per scalar entry: count, then the numbers
        self.arrays: list[np.ndarray] = []
        self.strs: list[str] = []

    def array(self, mode: str, name: str, arr: np.ndarray, member: str = "") -> None:
        arr = np.asarray(arr)
        if arr.dtype == np.bool_:
            if (member or name).endswith("mask"):  # boolean masks travel additive: True keeps (0)
                kind, arr = "A", np.where(arr, 0.0, -np.inf)
            else:
                kind = "L"
        elif arr.dtype.kind in "iu":
            kind = "I" if arr.size == 0 or np.abs(arr).max() <= _INT32_MAX else "A"
        elif arr.dtype.kind == "f":
            kind = "A"
        else:
            raise TypeError(f"r: input {member or name!r} has dtype {arr.dtype}; expected numbers or booleans")
        self.entries.append(f"{kind}\t{mode}\t{name}\t{member}")
        self.arrays.append(arr)

    def option(self, mode: str, name: str, value: Any) -> None:
        values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
        values = [v.item() if isinstance(v, np.generic) else v for v in values]
        if all(isinstance(v, str) for v in values):  # includes the empty list: character(0)
            kind = "c"
        elif all(isinstance(v, bool) for v in values):
            kind = "l"
        elif all(isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _INT32_MAX for v in values):
            kind = "i"
        elif all(isinstance(v, (int, float)) for v in values):
            kind = "n"
        else:
            raise TypeError(f"r: option {name}={value!r} is neither numbers nor strings")
        self.entries.append(f"{kind}\t{mode}\t{name}\t")
        self.header.append(len(values))
        if kind == "c":
            self.strs += values
        else:
            self.header += [float(v) for v in values]

    def group(self, name: str) -> None:
        self.entries.append(f"G\tg\t{name}\t")


def _index_offset(spec: ops.OpSpec, name: str) -> int:
    """1 for an array with the INDEX role (class indices: 0-based here, 1-based in R), else 0."""
    try:
        return 1 if spec.role(name) is ops.Role.INDEX else 0
    except KeyError:  # no declared role: passed through as it is
        return 0


def _to_r_values(spec: ops.OpSpec, name: str, arr: Any) -> Any:
    """An input's values as R sees them: INDEX arrays shifted to 1-based (integers stay integers)."""
    offset = _index_offset(spec, name)
    return np.asarray(arr) + offset if offset else arr


def _read_values(r: _EmbeddedR, res: Any) -> list[np.ndarray]:
    """The output arrays of a successful call: res = list(text, header, value, value, ...)."""
    header = r.from_r(res[1]).astype(np.int64)
    out = []
    h = 1
    for i in range(int(header[0])):
        nd = int(header[h])
        shape = tuple(int(d) for d in header[h + 1 : h + 1 + nd])
        h += 1 + nd
        out.append(r.from_r(res[2 + i], shape))
    return out


class RImplementation(Implementation):
    """Runs an R port through an embedded R; ``port`` is a user's .R file (or a directory of them)."""

    name = "r"

    def __init__(self, port: Path | None = None) -> None:
        self.files = _port_files(port)
        self.user_port = port is not None
        self.last_warnings: list[str] = []
        self._r = _embedded_r()
        with _LOCK:
            ri = self._r.ri
            self._env = self._r.new_env(parent=ri.globalenv)
            failure, *load_warnings = list(self._r.load(self._env, ri.StrSexpVector([str(f) for f in self.files])))
        if failure:
            self._env = None
            raise ImplementationUnavailable(f"r: cannot load port {failure}")
        for w in load_warnings:
            warnings.warn(f"r: loading {w}", RWarning, stacklevel=2)
        self._where = str(self.files[0]) if len(self.files) == 1 else f"{self.files[0].parent}/*.R"

    def describe(self) -> str:
        origin = "user port" if self.user_port else "port"
        files = ", ".join(str(f) for f in self.files)
        return f"r: {self._r.version}, {origin} {files}"

    def close(self) -> None:
        self._env = None  # the embedded R itself lives until the process ends

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        if self._env is None:
            raise ImplementationError("r: implementation is closed")
        spec = ops.get(op)
        call = _Call(op)
        for name in spec.args:
            if name not in inputs:
                raise KeyError(f"{op}: required input {name!r} is absent")
            call.array("p", name, _to_r_values(spec, name, inputs[name]))
        # Groups travel by name but sit in their natural place, after the required arrays:
        # classifier_step(x_emb, label, params = params, lr, frozen = frozen) matches `params` by
        # name first, then the positional ones in order, whatever the port's formals order.
        for group, members in spec.groups.items():
            call.group(group)
            for member in members:
                key = f"{group}.{member}"
                if key in inputs:
                    call.array("g", group, _to_r_values(spec, key, inputs[key]), member)
        for name in spec.positional_options:
            if options.get(name) is not None:
                call.option("p", name, options[name])
        for name in spec.kwargs:
            if name in inputs:
                call.array("k", name, _to_r_values(spec, name, inputs[name]))
        for name in spec.options:
            if options.get(name) is not None:
                call.option("k", name, options[name])

        r = self._r
        with _LOCK:
            try:
                args = [
                    (None, self._env),
                    (None, r.strs(tuple(call.entries))),
                    (None, r.to_r(np.array(call.header, dtype=np.float64)) if call.header else r.ri.NULL),
                    (None, r.strs(tuple(call.strs)) if call.strs else r.ri.NULL),
                ]
                args += [(None, r.to_r(arr)) for arr in call.arrays]
                res = r.call.rcall(args, r.ri.globalenv)
            except Exception as exc:  # the bridge itself failed (interrupt, R out of memory)
                raise ImplementationError(f"{op}: R failed outside the port's own error handling: {exc}") from exc
            text = str(res[0][0]).split("\x1e")
            status, message, warns, traceback, names = text[0], text[1], text[2], text[3], text[4:]
            values = _read_values(r, res) if status == "ok" else []
        self.last_warnings = warns.split("\n") if warns else []
        if status == "missing":
            raise OperationMissing(f"{op} is not defined in {self._where}")
        if status != "ok":
            if status == "error" and traceback:
                message += "\nR call stack (innermost last):\n  " + traceback.replace("\n", "\n  ")
            if warns:
                message += "\nR warnings before the error:\n  " + warns.replace("\n", "\n  ")
            raise ImplementationError(f"{op}: {message}")
        for w in self.last_warnings:
            warnings.warn(f"r: {op}: {w}", RWarning, stacklevel=2)
        return self._name_outputs(spec, names, values)

    def _name_outputs(self, spec: ops.OpSpec, names: list[str], values: list[np.ndarray]) -> Arrays:
        if names == [""]:  # a bare matrix/array rather than a named list
            if len(spec.outputs) != 1:
                wanted = ", ".join(f"{o} = ..." for o in spec.outputs)
                raise ImplementationError(f"{spec.name}: returned a bare array; expected list({wanted})")
            names = [spec.outputs[0]]
        result = dict(zip(names, values, strict=True))
        for name, arr in result.items():
            # R has no 0-D/1-D distinction for length-1 results: settle it by the declared role
            try:
                role = spec.role(name)
            except KeyError:
                continue
            if role is ops.Role.VECTOR and arr.ndim == 0:
                result[name] = arr.reshape(1)
            elif role is ops.Role.SCALAR and arr.size == 1 and arr.ndim > 0:
                result[name] = arr.reshape(())
            elif role is ops.Role.INDEX:  # 1-based in R, 0-based here
                result[name] = result[name] - 1
        missing = [o for o in spec.outputs if o not in result and not any(k.startswith(o + ".") for k in result)]
        if missing:
            raise ImplementationError(
                f"{spec.name}: result lacks {', '.join(missing)}; it has {', '.join(result) or 'nothing'}"
            )
        return result
