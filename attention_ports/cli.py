"""``attention-ports``: generate fixtures, check them for drift, verify implementations, benchmark.

Exit codes (every command):

  0    agree: nothing failed (``verify``: cases of an operation a port does not implement are
       ``missing``, counted apart, and fail only with ``--strict``; ``check-fixtures``: no drift)
  1    disagree: a case failed or errored, an output was not returned, ``--strict`` and a case
       missing, CI=true and an implementation passed zero cases, or a regression gate failed
       (``--known-failures``, ``--baseline``) (``check-fixtures``: drift)
  2    bad input or usage: an unknown option, a malformed manifest or catalogue (file and field
       named), a fixture file that fails its checks (``verify`` still runs and reports the other
       cases), a report target that cannot be written (checked before the run), a malformed
       known-failures file or baseline report (file and line or field named)
  3    internal error: an unexpected exception in attention-ports itself (a short traceback is
       printed; please report it)
  130  interrupted by SIGINT, 143 by SIGTERM (``verify``: in any phase): no new case starts, the
       workers are killed, the reports of the cases that ran are written (``"interrupted": true`` in
       the JSON where cases were left), then the table is printed; a signal once every case has
       ended still writes every report. A second signal quits at once (no report half-written).

A stdout that closes (``verify | head -1``) or fails is no error of the run: the reports are written
and the exit status is the verdict's (attention_ports/core/streams.py).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from attention_ports.core import paths, progress, streams
from attention_ports.core.io import abandon_temporaries
from attention_ports.core.targets import TargetError, check_targets
from attention_ports.fixtures.store import REPO_FIXTURES, FixtureError, check, generate
from attention_ports.pipeline import gates, outcome, shards
from attention_ports.pipeline import verify as pipeline
from attention_ports.pipeline.verify import fixtures_meta, verify_meta  # noqa: F401 (cli.verify_meta: the tests' name)
from attention_ports.runtimes import reaper, registry, supervisor
from attention_ports.spec import ops
from attention_ports.spec import precision as formats
from attention_ports.spec.catalogue import CatalogueError
from attention_ports.tools import doctor, installers, skeleton, skeleton_c, skeleton_kits, skeleton_octave
from attention_ports.tools.mutation import MutantError

DEFAULT_IMPLS = list(registry.IMPLEMENTATIONS)

EXIT_AGREE = 0
EXIT_DISAGREE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_SIGNAL_BASE = 128  # + the signal's number: 130 for SIGINT, 143 for SIGTERM (the shell's convention)
BAD_INPUT = (FixtureError, CatalogueError, MutantError, TargetError, gates.GateError)


class Interrupted(BaseException):  # a signal, like KeyboardInterrupt, not an error
    """SIGTERM where no graceful handler is installed: unwinds like KeyboardInterrupt does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Stop:
    """How SIGINT and SIGTERM end a ``verify`` run, by the phase it is in (``phase``):

    - ``run`` (from the parsed options to the last case): ``event`` is set, no new case starts and
      every worker is killed at once (the case they were running is dropped, not blamed on them);
      the report of the cases that finished is written, marked interrupted. A source that cannot
      stop between cases (``unwind``: the generated and scale tiers) is unwound instead;
    - ``reports``: the reports are finished (nothing of a run is lost to a signal once its cases have
      a status), then the run ends without its table;
    - ``terminal`` (the reports are written; the table is being printed, maybe into a stdout nobody
      reads): the printing stops at once.

    A second signal ends the process at once in every phase: workers killed, the temporary files of
    reports being written removed (a report is whole or absent, never half-written).
    ``signum``: the first signal; ``signal_phase``: the phase it came in."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self.signal_phase = ""
        self.phase = "run"
        self.unwind = False

    def handler(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            supervisor.shutdown_all()
            abandon_temporaries()
            _say(f"\nattention-ports: {name} again: stopping now")
            os._exit(EXIT_SIGNAL_BASE + signum)
        self.signum, self.signal_phase = signum, self.phase
        self.event.set()
        supervisor.shutdown_all()
        if self.phase == "reports":
            _say(f"\nattention-ports: {name}: finishing the reports, then stopping (again to quit now)")
        elif self.phase == "terminal":
            _say(f"\nattention-ports: {name}: stopping (the reports are written)")
            raise Interrupted(signum)
        elif self.unwind:
            raise Interrupted(signum)
        else:
            _say(f"\nattention-ports: {name}: stopping (no new case starts; again to quit now)")


def _say(text: str) -> None:
    """A line on stderr from a signal handler. The handler may have interrupted a write to stderr
    itself, and CPython's buffered streams may refuse such a reentrant call (RuntimeError: not seen
    here, where a write blocked in a full pipe lets the handler's line through): the line then goes
    straight to the descriptor."""
    try:
        print(text, file=sys.stderr, flush=True)
    except RuntimeError:
        try:
            os.write(2, (text + "\n").encode())
        except OSError:
            pass


@contextlib.contextmanager
def graceful_stop() -> Iterator[Stop]:
    """SIGINT and SIGTERM handled by a :class:`Stop` for the block (signals reach only the main
    thread: elsewhere the Stop is never signalled)."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, stop.handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


PORT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def parse_port(text: str) -> tuple[str, Path]:
    """``r=FILE`` / ``julia=FILE`` (a port file), or ``NAME=PROGRAM`` for any other NAME: a port run
    as a command, PROGRAM an executable, a .py file or a .toml manifest (docs/protocol.md)."""
    name, sep, path = text.partition("=")
    builtin = [n for n in registry.IMPLEMENTATIONS if n not in registry.PORTABLE]
    if not sep or not path or not PORT_NAME.fullmatch(name) or name in builtin:
        raise argparse.ArgumentTypeError(
            f"--port takes NAME=PATH: {' or '.join(registry.PORTABLE)} with a port file, or any other "
            f"lower-case name (not {', '.join(builtin)}) with a port program or manifest; got {text!r}"
        )
    p = Path(path).expanduser()
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"--port {name}: no such file: {p}")
    if registry.is_command(name):
        from attention_ports.runtimes.command import manifest

        try:
            manifest.load(p)
        except manifest.ManifestError as exc:
            raise argparse.ArgumentTypeError(f"--port {name}: {exc}") from None
    return name, p.resolve()


def markdown_target(text: str) -> Path | None:
    """``--markdown FILE``; an empty value writes no markdown. CI steps pass
    ``"$GITHUB_STEP_SUMMARY"``, which only GitHub sets: elsewhere the step runs as it is, without a
    summary, instead of failing on ``.`` (what ``Path("")`` is) being a directory."""
    return Path(text) if text else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attention-ports", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="write the golden fixtures from the catalogue")
    g.add_argument("--out", type=Path, default=None, help="fixture folder (default: the checkout's fixtures/)")
    g.add_argument("--catalogue", type=Path, default=None, help="catalogue file (default: OUT/catalogue.toml)")
    g.add_argument("--jobs", type=int, default=None, help="worker processes for the exact truth (default: cores, <= 4)")

    c = sub.add_parser("check-fixtures", help="exit 0 only if every fixture matches its hash and a fresh generation")
    c.add_argument("--dir", type=Path, default=REPO_FIXTURES)
    c.add_argument("--jobs", type=int, default=None, help="worker processes for the fresh generation")

    v = sub.add_parser("verify", help="run implementations on the fixtures and report agreement")
    v.add_argument("--impl", action="append", choices=DEFAULT_IMPLS, help="implementation (repeatable; default: all)")
    v.add_argument("--case", action="append", default=[], help="case id or glob (repeatable; default: all)")
    v.add_argument(
        "--port",
        action="append",
        type=parse_port,
        default=[],
        help="NAME=PATH: a user's R or Julia port (r=FILE, julia=FILE), or a port program or manifest under any "
        "other NAME (docs/protocol.md)",
    )
    v.add_argument("--dir", type=Path, default=REPO_FIXTURES, help="fixture folder")
    v.add_argument(
        "--precision",
        default=None,
        help=(
            "judge in this arithmetic: float64, float32, bfloat16/float32, float16/float32 or float16 "
            "(the built-ins run in it; default: each port's declaration)"
        ),
    )
    v.add_argument("--json", type=Path, default=None, help="write the machine-readable report here")
    v.add_argument("--junit", type=Path, default=None, help="write JUnit XML here (one testcase per impl x case)")
    v.add_argument(
        "--markdown",
        type=markdown_target,
        default=None,
        help="write a markdown summary here (a CI step summary; an empty value: none)",
    )
    v.add_argument("--html", type=Path, default=None, help="write one self-contained HTML page with heatmaps here")
    v.add_argument("--strict", action="store_true", help="missing (not implemented) operations fail too")
    v.add_argument(
        "--quiet",
        action="store_true",
        help="no table: one line per failing output, the repro commands, the counts and the verdict",
    )
    v.add_argument(
        "--sequential",
        action="store_true",
        help="run the implementations one after another (default: side by side; the results are the same)",
    )
    v.add_argument(
        "--random",
        type=int,
        default=None,
        metavar="N",
        help="instead of the fixtures, N cases generated by hypothesis per implementation (exact truth at run time)",
    )
    v.add_argument("--seed", type=int, default=None, help="with --random: the seed (default: a fresh one, printed)")
    v.add_argument(
        "--op",
        action="append",
        default=[],
        choices=list(ops.OPS),
        help="only this operation's cases, in every tier (repeatable; default: every operation)",
    )
    v.add_argument("--dump", type=Path, default=None, help="with --random: write a failing case as fixtures here")
    v.add_argument(
        "--tier",
        choices=["catalogue", "scale"],
        default="catalogue",
        help="catalogue: the fixtures (default); scale: L = 1024, 4096, 16384 at run time (fixtures/scale.toml, slow)",
    )
    v.add_argument("--no-cache", action="store_true", help="scale tier: recompute the exact truth of the sampled rows")
    v.add_argument(
        "--shard",
        default=None,
        metavar="K/N",
        help="run the K-th of N parts of the selected cases, balanced by expected cost (then merge-reports)",
    )

    add_gate_options(v)

    mr = sub.add_parser("merge-reports", help="merge the JSON reports of verify --shard K/N into the run's one report")
    mr.add_argument("reports", nargs="+", type=Path, help="every shard's JSON report (verify --shard K/N --json F)")
    mr.add_argument("--json", type=Path, default=None, help="write the merged machine-readable report here")
    mr.add_argument("--junit", type=Path, default=None, help="write the merged JUnit XML here")
    mr.add_argument(
        "--markdown", type=markdown_target, default=None, help="write the merged markdown summary here (empty: none)"
    )
    mr.add_argument("--html", type=Path, default=None, help="write the merged HTML page here")
    mr.add_argument("--strict", action="store_true", help="missing (not implemented) operations fail too")
    add_gate_options(mr)

    d = sub.add_parser("doctor", help="show which runtimes are available and the command that gets each missing one")
    d.add_argument(
        "--need",
        action="append",
        choices=doctor.NEEDS,
        help="require only these (repeatable; default: all); the others are not probed",
    )

    s = sub.add_parser(
        "setup",
        help="install a runtime with the packaged installer (R + rpy2, Julia, a C compiler, Octave, rustc, Node; "
        "python: the Python kit needs only NumPy)",
    )
    s.add_argument("runtime", choices=installers.RUNTIMES)

    cp = sub.add_parser(
        "check-port", help="probe a port program's handling of the protocol and say what is wrong (docs/protocol.md)"
    )
    cp.add_argument(
        "port_command",
        nargs="+",
        metavar="COMMAND",
        help="the port: a program, a .py file or a .toml manifest, or a command line (after --)",
    )
    cp.add_argument("--timeout", type=seconds, default=10.0, help="seconds the port has for each probe (default 10)")

    i = sub.add_parser("init", help="write a port skeleton with every contract operation as a stub")
    i.add_argument("language", choices=[*skeleton.LANGUAGES, "c", "octave", *skeleton_kits.LANGUAGES])
    i.add_argument(
        "path",
        type=Path,
        help="the new file (.R for r, .jl for julia, .c for c, .m for octave, .rs for rust, .js for javascript, "
        ".py for python); never overwritten",
    )
    i.add_argument(
        "--precision",
        default="float64",
        help='julia only: "float32" writes a Float32-ready skeleton declaring precision = "float32" (default float64)',
    )

    b = sub.add_parser(
        "bench",
        help="compute time against NumPy, transport against a raw pipe, cold start and peak memory (ratios in one run)",
    )
    b.add_argument(
        "--impl",
        action="append",
        choices=DEFAULT_IMPLS,
        help="implementation (repeatable; default: all, unless --kit is given)",
    )
    b.add_argument(
        "--kit",
        action="append",
        metavar="NAME",
        help="a port kit whose transport is measured: c, rust, javascript, python (repeatable; default: all, "
        "unless --impl is given)",
    )
    b.add_argument("--repeats", type=int, default=5, help="measurements per point; the best is kept (default 5)")
    b.add_argument("--json", type=Path, default=None, help="write the machine-readable results here")
    b.add_argument("--no-verify", action="store_true", help="skip the cold `verify` runs (faster)")
    b.add_argument(
        "--tolerances",
        action="store_true",
        help="instead of speed: how tight a precision tier's bounds are, beside torch's assert_close and "
        "FlashAttention's 2x rule (false alarms, smallest relative error caught)",
    )
    b.add_argument(
        "--precision",
        default="float32",
        metavar="NAME",
        help="with --tolerances: the tier measured (default float32)",
    )
    b.add_argument(
        "--length",
        action="append",
        type=int,
        metavar="L",
        help="with --tolerances: generated SDPA sizes, d = 64 (repeatable; default 256, 1024, 4096; 0: none)",
    )

    cov = sub.add_parser("coverage", help="print the coverage matrix (operation x option/regime -> cases) as markdown")
    cov.add_argument("--catalogue", type=Path, default=REPO_FIXTURES / "catalogue.toml")
    cov.add_argument("--readme", type=Path, default=None, help="rewrite the generated block of this page instead")
    cov.add_argument("--check", action="store_true", help="exit 1 if a cell has fewer than 2 cases")

    mut = sub.add_parser("mutation", help="run the mutation kit: single-bug variants of our R, Julia and C ports")
    mut.add_argument("--lang", action="append", choices=["r", "julia", "c"], help="language (repeatable; default: all)")
    mut.add_argument("--mutant", action="append", default=[], help="mutant id or glob (repeatable; default: all)")
    mut.add_argument("--dir", type=Path, default=REPO_FIXTURES, help="fixture folder")
    mut.add_argument("--jobs", type=int, default=None, help="mutants run at once (default: CPU count, max 4)")
    mut.add_argument("--json", type=Path, default=None, help="write every mutant's kill row (mutant x case) here")
    mut.add_argument(
        "--scope",
        choices=["reachable", "home"],
        default="reachable",
        help="cases of every operation the edit reaches (default), or only the nearest one's (faster)",
    )
    mut.add_argument("--list", action="store_true", help="list the mutants and the operations each reaches; run none")
    return parser


def add_gate_options(p: argparse.ArgumentParser) -> None:
    """The regression gates' options (attention_ports/pipeline/gates.py), the same on verify and merge-reports."""
    p.add_argument(
        "--known-failures",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="implementation NAME's known failures, one 'CASE OUTPUT  # reason' a line (repeatable): a listed "
        "failure does not fail the run, an unlisted one does, and so does a listed one that passes",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="REPORT.json",
        help="fail on regressions against this JSON report",
    )
    p.add_argument(
        "--baseline-factor",
        type=float,
        default=None,
        metavar="X",
        help=f"with --baseline: err/bnd past X x max(baseline, floor) fails (default {gates.DEFAULT_FACTOR:g})",
    )
    p.add_argument(
        "--baseline-floor",
        type=float,
        default=None,
        metavar="F",
        help=f"with --baseline: err/bnd below F counts as F, rounding-level (default {gates.DEFAULT_FLOOR:g})",
    )
    p.add_argument(
        "--baseline-diff",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="with --baseline: write what got worse and better here (.md: markdown, .json: JSON; repeatable)",
    )


def gate_options(args: argparse.Namespace, targets: dict[str, Path]) -> gates.Gates:
    """The gates the options name, their files read and checked before the run (GateError: exit 2)."""
    return gates.from_options(
        args.known_failures, args.baseline, args.baseline_factor, args.baseline_floor, args.baseline_diff, targets
    )


def progress_bar(what: str) -> Callable[[int, int, str], None]:
    """A progress bar on stderr (a tty), or a plain line every 10% (a log file, CI)."""
    return progress.bar(what)


def cmd_generate(args: argparse.Namespace) -> int:
    if args.out is None:
        if paths.installed():  # never rewrite the fixtures inside site-packages
            print(
                "attention-ports generate: an installed package's fixtures are read-only; pass --out DIR",
                file=sys.stderr,
            )
            return 2
        args.out = REPO_FIXTURES
    rep = generate(args.out, args.catalogue, workers=args.jobs, progress=progress_bar("generate"))
    if args.out.resolve() == REPO_FIXTURES.resolve() and args.catalogue is None:
        from attention_ports.fixtures import precision  # every precision tier's fixtures too

        for path in precision.generate_tiers():
            print(f"wrote   {path}")
    for rel in rep.written:
        print(f"wrote   {args.out / rel}")
    for rel in rep.removed:
        print(f"removed {args.out / rel}")
    print(f"{len(rep.written)} written, {len(rep.unchanged)} unchanged, {len(rep.removed)} removed")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    problems = check(args.dir, workers=args.jobs, progress=progress_bar("check-fixtures"))
    if args.dir.resolve() == REPO_FIXTURES.resolve():
        from attention_ports.fixtures import precision  # every precision tier's fixtures too

        problems += precision.check_tiers()
    for p in problems:
        print(f"DRIFT {p}")
    if problems:
        print(f"{len(problems)} problem(s) in {args.dir}; regenerate with `attention-ports generate --out {args.dir}`")
        return 1
    print(f"fixtures in {args.dir} match their manifest and a fresh generation")
    return 0


def report_targets(args: argparse.Namespace) -> dict[str, Path]:
    """Every report file the options name, resolved and proved writable before the run (exit 2 if
    not). A new report option joins here."""
    options = {"--json": "json", "--junit": "junit", "--markdown": "markdown", "--html": "html"}
    return check_targets({opt: getattr(args, attr, None) for opt, attr in options.items()})


def cmd_verify(args: argparse.Namespace) -> int:
    """Every tier through the one pipeline (attention_ports/pipeline/): the case source the options
    name, the one selection of implementations, one report in every format, one exit status.

    The reports are written before anything is printed (the table can block on a stdout nobody
    reads, or fail on one that closed), and a signal in any phase ends the run with them (:class:`Stop`)."""
    with graceful_stop() as stop:  # first: from here on a signal is a stop, never a lost report
        try:
            source = pipeline.source_from_args(args)
        except pipeline.UsageError as exc:
            print(f"attention-ports verify: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        targets = report_targets(args)
        gate = gate_options(args, targets)
        sel = pipeline.select_implementations(args.impl, args.port)
        gates.prepare(gate, sel.impls, source.tier, getattr(source, "precision", None), source.fixtures_dir())
        shard = None
        if args.shard is not None:
            try:
                shard = shards.parse_shard(args.shard)
            except ValueError as exc:
                print(f"attention-ports verify: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
        stop.unwind = not source.graceful
        if stop.unwind and stop.signum is not None:  # came before the run: it cannot stop once started
            raise Interrupted(stop.signum)
        report = pipeline.run(source, sel, shard=shard, strict=args.strict, stop=stop.event)
        gated = gates.apply(report, gate) if gate else None
        stop.phase = "reports"
        outcome.write_reports(report, targets)
        if gated is not None:  # the diff files are reports too: written before the table
            gates.write_diff(gated, gate)
        stop.phase = "terminal"
        try:
            if stop.signal_phase != "reports":  # asked to stop once the cases had ended: no table
                source.terminal(report, args.quiet)
                if gated is not None:
                    print(gates.terminal(gated, gate))
            code = outcome.exit_status(report, sel.ports, stop.signum)
            sys.stdout.flush()  # here, where a signal can stop it, not in the interpreter's exit
        except Interrupted as exc:
            streams.stop(sys.stdout)  # what it still buffers goes nowhere, and never blocks the exit
            return EXIT_SIGNAL_BASE + exc.signum
        return code


def cmd_merge_reports(args: argparse.Namespace) -> int:
    targets = report_targets(args)
    try:
        return shards.main(args.reports, targets, strict=args.strict, gate=gate_options(args, targets))
    except shards.ShardError as exc:
        print(f"attention-ports merge-reports: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from attention_ports.core.io import atomic_write
    from attention_ports.tools import bench

    if args.repeats < 1:
        print("attention-ports bench: --repeats must be at least 1", file=sys.stderr)
        return 2
    if args.tolerances:
        return _bench_tolerances(args)
    unknown = [k for k in args.kit or [] if k not in bench.KITS]
    if unknown:
        print(f"attention-ports bench: no kit {unknown[0]!r}; the kits are {', '.join(bench.KITS)}", file=sys.stderr)
        return 2
    # neither named: everything; else only what is named
    impls = args.impl or ([] if args.kit else DEFAULT_IMPLS)
    kits = args.kit or ([] if args.impl else list(bench.KITS))
    options = bench.Options(impls=impls, repeats=args.repeats, verify=not args.no_verify, kits=kits)
    doc = bench.run(options, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(bench.table(doc))
    if args.json:
        atomic_write(args.json, (json.dumps(doc, indent=1) + "\n").encode())
    failed = [r["implementation"] for r in doc["implementations"] if "error" in r]
    failed += [r["kit"] for r in doc["kits"] if "error" in r]
    return 3 if failed else 0


def _bench_tolerances(args: argparse.Namespace) -> int:
    import json

    from attention_ports.core.io import atomic_write
    from attention_ports.spec.precision import PrecisionError
    from attention_ports.tools import tolerances

    lengths = tolerances.LENGTHS if args.length is None else [n for n in args.length if n > 0]
    if any(n < 3 for n in lengths):
        print("attention-ports bench: --length must be at least 3 (or 0 for none)", file=sys.stderr)
        return 2
    try:
        doc = tolerances.run(
            args.precision,
            impls=args.impl or tolerances.IMPLS,
            lengths=lengths,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    except PrecisionError as exc:
        print(f"attention-ports bench: {exc}", file=sys.stderr)
        return 2
    print(tolerances.table(doc))
    if args.json:
        atomic_write(args.json, (json.dumps(doc, indent=1) + "\n").encode())
    return 0


def cmd_coverage(args: argparse.Namespace) -> int:
    from attention_ports.tools import coverage

    matrix = coverage.build_matrix(args.catalogue)
    markdown = coverage.render_markdown(matrix)
    if args.readme is None:
        print(markdown)
    else:
        coverage.update_readme(args.readme, markdown)
        print(f"updated the coverage block of {args.readme}")
    problems = matrix.problems()
    for line in problems:
        print(f"UNDER-COVERED {line}", file=sys.stderr)
    return 1 if args.check and problems else 0


def cmd_mutation(args: argparse.Namespace) -> int:
    import fnmatch
    import json

    from attention_ports.tools import mutation

    json_target = check_targets({"--json": args.json}).get("--json")
    langs = args.lang or list(mutation.LANGS)
    chosen = [
        m
        for m in mutation.load_mutants()
        if m.lang in langs and (not args.mutant or any(fnmatch.fnmatchcase(m.id, g) for g in args.mutant))
    ]
    if not chosen:
        print(f"attention-ports: no mutant matches {' or '.join(args.mutant)}", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            reach = ", ".join(sorted(mutation.reachable_ops(m)))
            judged = ", ".join(f"{p}: {m.expectation(p)}" for p in m.precisions)
            print(f"{m.id:<34} {judged} [{m.bug_class}] {m.file}: {m.description} (reaches {reach})")
        return 0
    # Mutants judged in float32 only (docs/precision.md) run from the test suite, not from here yet.
    lower = [m.id for m in chosen if formats.DEFAULT not in m.precisions]
    if lower:
        print(f"attention-ports: judged in float32 only, not run here: {', '.join(lower)}", file=sys.stderr)
        chosen = [m for m in chosen if m.id not in lower]
        if not chosen:
            return 2
    for lang in sorted({m.lang for m in chosen}):
        why = mutation.unavailable(lang)  # a runtime that cannot start would "kill" every mutant: refuse instead
        if why:
            print(f"attention-ports: {lang} is unavailable, cannot run its mutants: {why}", file=sys.stderr)
            return 2
    jobs = args.jobs or min(4, os.cpu_count() or 1)

    def progress(res: mutation.MutantResult, done: int, total: int) -> None:
        print(f"[{done}/{total}] {res.mutant.id}: {res.verdict()} ({res.seconds:.1f}s)", file=sys.stderr, flush=True)

    start = time.perf_counter()
    results = mutation.run_kit(chosen, args.dir, jobs=jobs, progress=progress, scope=args.scope)
    for line in mutation.report_lines(results):
        print(line)
    print(f"{len(results)} mutants in {time.perf_counter() - start:.1f}s")
    if args.json:
        doc = {
            "version": 1,
            "min_kills": mutation.MIN_KILLS,
            "summary": mutation.summary(results),
            "mutants": [r.as_json() for r in results],
        }
        from attention_ports.core.io import atomic_write

        atomic_write(json_target, (json.dumps(doc, indent=1) + "\n").encode())
    return 0 if all(r.ok for r in results) else 1


def cmd_init(args: argparse.Namespace) -> int:
    if args.language == "c":
        if args.precision != "float64":  # the C kit's skeleton is one file of doubles
            print(f"attention-ports init: --precision {args.precision} is for julia, not c", file=sys.stderr)
            return EXIT_BAD_INPUT
        return skeleton_c.main(args.path)
    if args.language == "octave":
        if args.precision != "float64":  # the walkthrough's doubles; a float32 port declares it itself
            print(f"attention-ports init: --precision {args.precision} is for julia, not octave", file=sys.stderr)
            return EXIT_BAD_INPUT
        return skeleton_octave.main(args.path)
    if args.language in skeleton_kits.LANGUAGES:
        if args.precision != "float64":  # the kits' skeletons are float64; a float32 port declares it itself
            print(
                f"attention-ports init: --precision {args.precision} is for julia, not {args.language}", file=sys.stderr
            )
            return EXIT_BAD_INPUT
        return skeleton_kits.main(args.language, args.path)
    return skeleton.main(args.language, args.path, args.precision)


def cmd_check_port(args: argparse.Namespace) -> int:
    from attention_ports.runtimes.command import check

    return check.main(args.port_command, args.timeout)


def entry() -> int:
    """The ``attention-ports`` console script: :func:`main` in a process that adopts what its
    workers orphan (a child subreaper, attention_ports/runtimes/reaper.py says why only here)."""
    reaper.become_subreaper()
    return main()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # a usage error exits 2 here (argparse)
    handlers = {
        "generate": cmd_generate,
        "check-fixtures": cmd_check,
        "verify": cmd_verify,
        "merge-reports": cmd_merge_reports,
        "bench": cmd_bench,
        "coverage": cmd_coverage,
        "mutation": cmd_mutation,
        "doctor": lambda a: doctor.main(a.need),
        "setup": lambda a: installers.main(a.runtime),
        "init": cmd_init,
        "check-port": cmd_check_port,
    }
    try:
        with streams.guarded(), _sigterm_unwinds(args.command != "verify"):  # verify has its own (Stop)
            return handlers[args.command](args)
    except BAD_INPUT as exc:
        print(f"attention-ports: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        supervisor.shutdown_all()
        print("\nattention-ports: interrupted (SIGINT)", file=sys.stderr)
        return EXIT_SIGNAL_BASE + signal.SIGINT
    except Interrupted as exc:
        supervisor.shutdown_all()
        print(f"\nattention-ports: interrupted ({exc})", file=sys.stderr)
        return EXIT_SIGNAL_BASE + exc.signum
    except Exception as exc:  # a bug of ours: never exit 1, which means "the ports disagree"
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-6)
        print("".join(frames).rstrip(), file=sys.stderr)
        print(
            f"attention-ports: internal error ({type(exc).__name__}: {exc}); this is a bug in attention-ports, "
            f"not in a port (exit {EXIT_INTERNAL})",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


@contextlib.contextmanager
def _sigterm_unwinds(install: bool = True) -> Iterator[None]:
    """SIGTERM raises Interrupted (as SIGINT raises KeyboardInterrupt), so that ``finally`` blocks run,
    workers are closed and atomic writes are abandoned cleanly; ``verify`` installs its own (and
    none of this one, which would leave a moment where SIGTERM unwinds it before its own is in place)."""
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
