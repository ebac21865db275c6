"""``attention-ports``: generate fixtures, check them for drift, verify implementations, benchmark."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from attention_ports import doctor, installers, paths, registry, skeleton
from attention_ports.catalogue import CatalogueError
from attention_ports.fixtures import REPO_FIXTURES, FixtureError, check, generate
from attention_ports.mutation import MutantError
from attention_ports.report import accuracy_table, failure_details, summary_lines, table, write_json
from attention_ports.runner import FAILING, in_ci, run_suite

DEFAULT_IMPLS = list(registry.IMPLEMENTATIONS)


def parse_port(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or name not in registry.PORTABLE or not path:
        raise argparse.ArgumentTypeError(
            f"--port takes NAME=PATH with NAME one of {', '.join(registry.PORTABLE)}; got {text!r}"
        )
    p = Path(path).expanduser()
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"--port {name}: no such file: {p}")
    return name, p.resolve()


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
    v.add_argument("--port", action="append", type=parse_port, default=[], help="NAME=PATH: a user's R or Julia port")
    v.add_argument("--dir", type=Path, default=REPO_FIXTURES, help="fixture folder")
    v.add_argument("--json", type=Path, default=None, help="write the machine-readable report here")
    v.add_argument("--strict", action="store_true", help="missing operations fail too")
    v.add_argument("--quiet", action="store_true", help="no table, only failures and the summary")
    v.add_argument(
        "--tier",
        choices=["catalogue", "scale"],
        default="catalogue",
        help="catalogue: the fixtures (default); scale: L = 1024, 4096, 16384 at run time (fixtures/scale.toml, slow)",
    )
    v.add_argument("--no-cache", action="store_true", help="scale tier: recompute the exact truth of the sampled rows")

    d = sub.add_parser("doctor", help="show which runtimes are available and the command that gets each missing one")
    d.add_argument(
        "--need",
        action="append",
        choices=doctor.NEEDS,
        help="require only these (repeatable; default: all); the others are not probed",
    )

    s = sub.add_parser("setup", help="install a runtime with the packaged installer (R + rpy2, or Julia)")
    s.add_argument("runtime", choices=installers.RUNTIMES)

    i = sub.add_parser("init", help="write a port skeleton with every contract operation as a stub")
    i.add_argument("language", choices=skeleton.LANGUAGES)
    i.add_argument("path", type=Path, help="the new file (.R for r, .jl for julia); never overwritten")

    b = sub.add_parser(
        "bench",
        help="compute time against NumPy, transport against a raw pipe, cold start and peak memory (ratios in one run)",
    )
    b.add_argument("--impl", action="append", choices=DEFAULT_IMPLS, help="implementation (repeatable; default: all)")
    b.add_argument("--repeats", type=int, default=5, help="measurements per point; the best is kept (default 5)")
    b.add_argument("--json", type=Path, default=None, help="write the machine-readable results here")
    b.add_argument("--no-verify", action="store_true", help="skip the cold `verify` runs (faster)")

    cov = sub.add_parser("coverage", help="print the coverage matrix (operation x option/regime -> cases) as markdown")
    cov.add_argument("--catalogue", type=Path, default=REPO_FIXTURES / "catalogue.toml")
    cov.add_argument("--readme", type=Path, default=None, help="rewrite the generated block of this README instead")
    cov.add_argument("--check", action="store_true", help="exit 1 if a cell has fewer than 2 cases")

    mut = sub.add_parser("mutation", help="run the mutation kit: single-bug variants of our R and Julia ports")
    mut.add_argument("--lang", action="append", choices=["r", "julia"], help="language (repeatable; default: both)")
    mut.add_argument("--mutant", action="append", default=[], help="mutant id or glob (repeatable; default: all)")
    mut.add_argument("--dir", type=Path, default=REPO_FIXTURES, help="fixture folder")
    mut.add_argument("--jobs", type=int, default=None, help="Julia mutants run at once (default: CPU count, max 4)")
    mut.add_argument("--json", type=Path, default=None, help="write every mutant's kill row (mutant x case) here")
    mut.add_argument(
        "--scope",
        choices=["reachable", "home"],
        default="reachable",
        help="cases of every operation the edit reaches (default), or only the nearest one's (faster)",
    )
    mut.add_argument("--list", action="store_true", help="list the mutants and the operations each reaches; run none")
    return parser


def progress_bar(what: str) -> Callable[[int, int, str], None]:
    """A progress bar on stderr (a tty), or a plain line every 10% (a log file, CI)."""
    start = time.perf_counter()
    shown = {"decile": -1}

    def show(done: int, total: int, label: str) -> None:
        elapsed = time.perf_counter() - start
        if sys.stderr.isatty():
            width = 30
            filled = width * done // max(total, 1)
            bar = "#" * filled + "." * (width - filled)
            end = "\n" if done == total else ""
            print(
                f"\r\033[K{what} [{bar}] {done}/{total} {elapsed:5.1f}s {label}", end=end, file=sys.stderr, flush=True
            )
            return
        decile = 10 * done // max(total, 1)
        if decile > shown["decile"] or done == total:
            shown["decile"] = decile
            print(f"{what}: {done}/{total} cases ({elapsed:.1f} s)", file=sys.stderr, flush=True)

    return show


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
    for rel in rep.written:
        print(f"wrote   {args.out / rel}")
    for rel in rep.removed:
        print(f"removed {args.out / rel}")
    print(f"{len(rep.written)} written, {len(rep.unchanged)} unchanged, {len(rep.removed)} removed")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    problems = check(args.dir, workers=args.jobs, progress=progress_bar("check-fixtures"))
    for p in problems:
        print(f"DRIFT {p}")
    if problems:
        print(f"{len(problems)} problem(s) in {args.dir}; regenerate with `attention-ports generate --out {args.dir}`")
        return 1
    print(f"fixtures in {args.dir} match their manifest and a fresh generation")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    if args.tier == "scale":
        from attention_ports import scale

        return scale.main(args)
    ports = dict(args.port)
    impls = args.impl or (list(dict.fromkeys([*DEFAULT_IMPLS])) if not ports else list(ports))
    for name in ports:
        if name not in impls:
            impls.append(name)
    required = set(DEFAULT_IMPLS) if in_ci() else set(args.impl or []) | set(ports)
    results = run_suite(args.dir, impls, ports, args.case, required=required)
    if not args.quiet:
        print(table(results))
        print()
    details = failure_details(results)
    if details:
        print(details)
        print()
    print(summary_lines(results))
    acc = accuracy_table(results)
    if acc:
        print()
        print(acc)
    if args.json:
        write_json(results, args.json, {"implementations": impls, "ports": {k: str(v) for k, v in ports.items()}})
    bad = {r.status for r in results} & (FAILING | ({"missing"} if args.strict else set()))
    # Partial ports are the user's business; an operation missing from a port we ship is our bug.
    ours_missing = sorted({r.impl for r in results if r.status == "missing" and r.impl not in ports})
    if ours_missing:
        print(f"the shipped port(s) {', '.join(ours_missing)} lack operations: that fails even without --strict")
    return 1 if bad or ours_missing else 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from attention_ports import bench
    from attention_ports.fixtures import atomic_write

    if args.repeats < 1:
        print("attention-ports bench: --repeats must be at least 1", file=sys.stderr)
        return 2
    options = bench.Options(impls=args.impl or DEFAULT_IMPLS, repeats=args.repeats, verify=not args.no_verify)
    doc = bench.run(options, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(bench.table(doc))
    if args.json:
        atomic_write(args.json, (json.dumps(doc, indent=1) + "\n").encode())
    failed = [r["implementation"] for r in doc["implementations"] if "error" in r]
    return 3 if failed else 0


def cmd_coverage(args: argparse.Namespace) -> int:
    from attention_ports import coverage

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
    import os

    from attention_ports import mutation

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
            print(f"{m.id:<34} {m.expect:<7} [{m.bug_class}] {m.file}: {m.description} (reaches {reach})")
        return 0
    for lang in sorted({m.lang for m in chosen}):
        try:  # a runtime that cannot start would "kill" every mutant: refuse instead
            registry.create(lang).close()
        except Exception as exc:
            print(f"attention-ports: {lang} is unavailable, cannot run its mutants: {exc}", file=sys.stderr)
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
        from attention_ports.fixtures import atomic_write

        atomic_write(args.json, (json.dumps(doc, indent=1) + "\n").encode())
    return 0 if all(r.ok for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {
        "generate": cmd_generate,
        "check-fixtures": cmd_check,
        "verify": cmd_verify,
        "bench": cmd_bench,
        "coverage": cmd_coverage,
        "mutation": cmd_mutation,
        "doctor": lambda a: doctor.main(a.need),
        "setup": lambda a: installers.main(a.runtime),
        "init": lambda a: skeleton.main(a.language, a.path),
    }
    try:
        return handlers[args.command](args)
    except (FixtureError, CatalogueError, MutantError) as exc:
        print(f"attention-ports: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
