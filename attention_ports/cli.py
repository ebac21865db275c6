"""``attention-ports``: generate fixtures, check them for drift, verify implementations, benchmark."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from attention_ports import doctor, installers, paths, registry, skeleton
from attention_ports.catalogue import CatalogueError
from attention_ports.fixtures import REPO_FIXTURES, FixtureError, check, generate
from attention_ports.report import failure_details, summary_lines, table, write_json
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

    c = sub.add_parser("check-fixtures", help="exit 0 only if every fixture matches its hash and a fresh generation")
    c.add_argument("--dir", type=Path, default=REPO_FIXTURES)

    v = sub.add_parser("verify", help="run implementations on the fixtures and report agreement")
    v.add_argument("--impl", action="append", choices=DEFAULT_IMPLS, help="implementation (repeatable; default: all)")
    v.add_argument("--case", action="append", default=[], help="case id or glob (repeatable; default: all)")
    v.add_argument("--port", action="append", type=parse_port, default=[], help="NAME=PATH: a user's R or Julia port")
    v.add_argument("--dir", type=Path, default=REPO_FIXTURES, help="fixture folder")
    v.add_argument("--json", type=Path, default=None, help="write the machine-readable report here")
    v.add_argument("--strict", action="store_true", help="missing operations fail too")
    v.add_argument("--quiet", action="store_true", help="no table, only failures and the summary")

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

    b = sub.add_parser("bench", help="time each implementation over the cases (cold start and warm)")
    b.add_argument("--impl", action="append", choices=DEFAULT_IMPLS)
    b.add_argument("--case", action="append", default=[])
    b.add_argument("--dir", type=Path, default=REPO_FIXTURES)
    b.add_argument("--repeat", type=int, default=3, help="warm passes after the cold one")
    return parser


def cmd_generate(args: argparse.Namespace) -> int:
    if args.out is None:
        if paths.installed():  # never rewrite the fixtures inside site-packages
            print(
                "attention-ports generate: an installed package's fixtures are read-only; pass --out DIR",
                file=sys.stderr,
            )
            return 2
        args.out = REPO_FIXTURES
    rep = generate(args.out, args.catalogue)
    for rel in rep.written:
        print(f"wrote   {args.out / rel}")
    for rel in rep.removed:
        print(f"removed {args.out / rel}")
    print(f"{len(rep.written)} written, {len(rep.unchanged)} unchanged, {len(rep.removed)} removed")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    problems = check(args.dir)
    for p in problems:
        print(f"DRIFT {p}")
    if problems:
        print(f"{len(problems)} problem(s) in {args.dir}; regenerate with `attention-ports generate --out {args.dir}`")
        return 1
    print(f"fixtures in {args.dir} match their manifest and a fresh generation")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
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
    if args.json:
        write_json(results, args.json, {"implementations": impls, "ports": {k: str(v) for k, v in ports.items()}})
    bad = {r.status for r in results} & (FAILING | ({"missing"} if args.strict else set()))
    # Partial ports are the user's business; an operation missing from a port we ship is our bug.
    ours_missing = sorted({r.impl for r in results if r.status == "missing" and r.impl not in ports})
    if ours_missing:
        print(f"the shipped port(s) {', '.join(ours_missing)} lack operations: that fails even without --strict")
    return 1 if bad or ours_missing else 0


def cmd_bench(args: argparse.Namespace) -> int:
    impls = args.impl or DEFAULT_IMPLS
    print(f"{'implementation':<12} {'cases':>5} {'cold s':>8} {'warm s':>8} {'per case ms':>12}")
    for name in impls:
        t0 = time.perf_counter()
        cold = run_suite(args.dir, [name], case_globs=args.case, progress=None)
        cold_s = time.perf_counter() - t0
        if any(r.status == "unavailable" for r in cold):
            print(f"{name:<12} unavailable")
            continue
        warm = []
        impl = registry.create(name)
        try:
            from attention_ports.fixtures import load_case
            from attention_ports.runner import select_entries

            cases = [load_case(args.dir, e) for e in select_entries(args.dir, args.case)]
            impl.run(cases[0].op, cases[0].inputs, cases[0].options)  # start and compile outside the clock
            for _ in range(max(args.repeat, 1)):
                t = time.perf_counter()
                for case in cases:
                    impl.run(case.op, case.inputs, case.options)
                warm.append(time.perf_counter() - t)
        finally:
            impl.close()
        best = min(warm)
        print(f"{name:<12} {len(cases):>5} {cold_s:>8.2f} {best:>8.2f} {1000 * best / len(cases):>12.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {
        "generate": cmd_generate,
        "check-fixtures": cmd_check,
        "verify": cmd_verify,
        "bench": cmd_bench,
        "doctor": lambda a: doctor.main(a.need),
        "setup": lambda a: installers.main(a.runtime),
        "init": lambda a: skeleton.main(a.language, a.path),
    }
    try:
        return handlers[args.command](args)
    except (FixtureError, CatalogueError) as exc:
        print(f"attention-ports: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
