"""The native conformance runners judge exactly as the Python suite does.

``Rscript ports/r/conformance.R PORT.R`` and ``julia ports/julia/conformance.jl PORT.jl`` read the
fixtures through fixtures/index.tsv and judge a port in R or Julia alone. Here each runs on a port
while ``attention-ports verify --port ... --json`` runs the same port on the same cases, and the
(case, output, status) sets must be equal, with the same exit status, the closing
``N passed, M failed, K missing`` line counting the same cases, and every failure's worst element
named in 1-based indices of the port's own layout (checked against the fixture's expected value
there). The ports: ours (every case, both languages), seed 000's R code verbatim (its errors carry
R's own message) and with its one-word fix, seed 003's two known-bad Julia transcriptions (their
softmax helper, their forward and their backward cases), ports with declarations or that do not
load (each on the cases of its operations and two of every other: ``_sample``), our Julia port
declared float32 (judged on the float32 tier, in Float32), and a spread of the mutation kit's
mutants, bugs and controls (each on its own cases, as tests/tools/test_mutation.py runs them).
The native runner runs while Python verifies, so the two halves share the cores.

Also: the runners from an unpacked wheel (what an R-only or Julia-only team has; declared,
undefined and undeclared operations), the masked-query convention files they pick, their
answers to bad usage and bad fixtures, a declared precision's checks (declaration.py's words) and
a --fixtures folder of another precision. Real R and Julia, no mocks; without them this skips
locally and fails under CI=true.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from attention_ports import cli
from attention_ports.fixtures import index as fixture_index
from attention_ports.fixtures.precision import lower_formats
from attention_ports.fixtures.store import (
    REPO_FIXTURES,
    generate,
    iter_entries,
    load_case,
    manifest_bytes,
    read_manifest,
)
from attention_ports.runtimes import declaration
from attention_ports.runtimes.julia import sysimage as julia_sysimage
from attention_ports.spec.precision import fixtures_dir
from attention_ports.tools import mutation
from tests.conftest import require

ROOT = Path(__file__).resolve().parent.parent
RUNNERS = {"r": ROOT / "ports" / "r" / "conformance.R", "julia": ROOT / "ports" / "julia" / "conformance.jl"}
OURS = {"r": ROOT / "ports" / "r" / "R", "julia": ROOT / "ports" / "julia" / "src"}
USER_PORTS = ROOT / "tests" / "data" / "ports"
CLOSING = re.compile(r"^(r|julia) conformance: (\d+) passed, (\d+) failed, (\d+) missing", re.M)
WORST = re.compile(r"worst at \[([\d, ]*)\] \(1-based\): expected ([^,\s]+), actual")
SEVERITY = ("pass", "missing", "fail", "error")
FUN_MISSING = 'Error in match.fun(FUN) : argument "FUN" is missing, with no default'
MUTANTS_PER_LANG = {"r": 4, "julia": 2}  # evenly spread over the kit, in its order
# Julia at -O1: half the compile time of the default -O2, with the same IEEE semantics (Julia never
# uses fast-math unasked); only the order of a @simd sum may differ, which every bound covers. The
# Python side's Julia worker runs at the default, so the two agree across levels too.
# scripts/native_tests.sh runs the runner at the default level over every case of our port.
JULIA_FLAGS = ("--startup-file=no", "-O1")


@dataclass(frozen=True)
class Port:
    id: str
    lang: str
    path: Path | None = None  # None: ours (verify --impl LANG)
    cases: tuple[str, ...] = ()  # globs; () = every case
    mutant: str = ""
    says: str = ""  # in every error's message and in the runner's own report: the port's own words
    passes: bool = False  # every verdict must be a pass (ours: no operation missing, none failing)


def _spread(items: list, k: int) -> list:
    if len(items) <= k:
        return items
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def _user(lang: str, name: str, *cases: str, passes: bool = False) -> Port:
    path = USER_PORTS / lang / f"{name}.{'R' if lang == 'r' else 'jl'}"
    return Port(f"{lang}-{name}", lang, path, cases, passes=passes)


def _sample(entries: list[dict], *own: str) -> tuple[str, ...]:
    """Every case of the globs ``own`` (the operations a port defines), and the first two of every
    other operation: each verdict a port gets on the others (missing, or an error where it does
    not load) is the same on all of an operation's cases, so the whole catalogue (191 cases, ~3 s
    of R a port) would repeat it."""
    first: dict[str, list[str]] = {}
    for e in entries:
        first.setdefault(e["op"], []).append(e["id"])
    return own + tuple(case for ids in first.values() for case in ids[:2])


def _ports() -> list[Port]:
    entries = list(iter_entries(REPO_FIXTURES))
    seed = _sample(entries, "self_attn_*", "seed000_*")
    ports = [
        Port("r-ours", "r"),  # ours: every case, in both languages
        Port("julia-ours", "julia"),
        # Seed 000 as published stops R: apply(scores, margin = 1, max) fills MARGIN with max.
        Port("r-seed000_verbatim", "r", USER_PORTS / "r" / "seed000_verbatim.R", seed, says=FUN_MISSING),
        _user("r", "seed000_margin_fixed", *seed),
        _user("r", "declared_attention_only", *_sample(entries, "softmax_*", "sdpa_*", "self_attn_*")),
        _user("r", "declares_undefined", *_sample(entries, "softmax_*", "self_attn_*")),
        _user("r", "syntax_error", *_sample(entries)),  # never loads: every case an error, naming the file
        _user("julia", "syntax_error", "softmax_ties", "clf_step_n1"),
        # Seed 003: its softmax helper (undeclared, so called: it normalises the whole array), the
        # forward whose scale is wrong, the backward that is wrong.
        _user("julia", "seed003_scale_bug", "softmax_*", "clf_forward_*"),
        _user("julia", "seed003_backward_bug", "clf_step_*"),
        # A declared precision (docs/precision.md): our Julia port declared float32, judged on the
        # float32 tier in Float32 (a float option, a boolean mask made additive), every family loaded
        # (the norms, the positions in the port's declared pairing, the optimizer).
        _user(
            "julia",
            "ours_float32",
            *("softmax_ties", "sdpa_custom_scale", "sdpa_causal_bool"),
            *("ln_affine_random", "rope_interleaved_n8_d8", "adamw_first_step_3x4"),
            passes=True,
        ),
    ]
    kit = mutation.load_mutants()
    for lang, k in MUTANTS_PER_LANG.items():
        for m in _spread([m for m in kit if m.lang == lang], k):
            ports.append(Port(f"{lang}-{m.id}", lang, None, tuple(mutation.cases_for(m, entries, "home")), m.id))
    return ports


PORTS = _ports()


def _julia() -> str:
    from attention_ports.runtimes.impl import ImplementationUnavailable
    from attention_ports.runtimes.julia.adapter import find_julia

    try:
        return find_julia()
    except ImplementationUnavailable as exc:
        require("julia", str(exc))
        raise


@functools.cache  # asked once per test process (an R start each time): a skip or failure is not cached
def _rscript() -> str:
    found = shutil.which("Rscript")
    if found is None:
        require("R", "Rscript is not on PATH (scripts/install_r.sh)")
    probe = subprocess.run([found, "-e", "quit(status = !requireNamespace('testthat', quietly = TRUE))"], check=False)
    if probe.returncode != 0:
        require("R", "testthat is not installed (scripts/install_r.sh)")
    return str(found)


def native_command(lang: str, runner: Path, port: Path, *args: str) -> list[str]:
    if lang == "r":
        return [_rscript(), str(runner), "--reporter", "summary", *args, str(port)]
    # On the checkout's Julia image where there is one: it holds the runner compiled (~4 s saved a
    # run), and the runner uses that copy only while it is byte for byte this checkout's
    # ports/julia/conformance.jl (its guard); an unpacked wheel's runner defines itself afresh, as
    # on a user's julia. scripts/native_tests.sh runs it without the image over every case.
    julia = _julia()
    return [julia, *JULIA_FLAGS, *julia_sysimage.runner_flags(julia), str(runner), *args, str(port)]


def verdicts(path: Path) -> set[tuple[str, str, str]]:
    return {(r["case"], r["output"], r["status"]) for r in json.loads(path.read_text())["results"]}


def case_counts(triples: set[tuple[str, str, str]]) -> tuple[int, int, int]:
    worst: dict[str, int] = {}
    for case, _, status in triples:
        worst[case] = max(worst.get(case, 0), SEVERITY.index(status))
    statuses = [SEVERITY[w] for w in worst.values()]
    return statuses.count("pass"), sum(s in ("fail", "error") for s in statuses), statuses.count("missing")


def reference_index(lang: str, port_index: list[int]) -> tuple[int, ...]:
    """A 1-based index into the port's result -> the 0-based index into the fixture's array."""
    zero = [i - 1 for i in port_index]
    return tuple(zero if lang == "r" else reversed(zero))


def check_worst_elements(lang: str, results: list[dict]) -> int:
    """Every failure's worst element, read in the port's layout, holds the fixture's expected value."""
    entries = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}
    checked = 0
    for r in results:
        m = WORST.search(r["message"]) if r["status"] == "fail" else None
        if m is None:
            continue
        expected = load_case(REPO_FIXTURES, entries[r["case"]]).expected[r["output"]].array
        at = reference_index(lang, [int(i) for i in m.group(1).split(",") if i.strip()])
        value, shown = float(expected[at]), float(m.group(2))
        assert value == shown or (np.isnan(value) and np.isnan(shown)), (r["case"], r["output"], at, r["message"])
        checked += 1
    return checked


@pytest.mark.parametrize("port", PORTS, ids=[p.id for p in PORTS])
def test_native_verdicts_equal_verify_json(port: Port, tmp_path: Path) -> None:
    if port.mutant:
        mutant = next(m for m in mutation.load_mutants() if m.id == port.mutant)
        path = mutation.materialise(mutant, tmp_path)
    else:
        path = port.path or OURS[port.lang]
    case_args = [a for c in port.cases for a in ("--case", c)]
    native_json, python_json = tmp_path / "native.json", tmp_path / "verify.json"
    cmd = native_command(port.lang, RUNNERS[port.lang], path, "--json", str(native_json), *case_args)
    native = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        which = ["--impl", port.lang] if port.path is None and not port.mutant else ["--port", f"{port.lang}={path}"]
        code = cli.main(["verify", *which, *case_args, "--json", str(python_json), "--quiet"])
        out, _ = native.communicate(timeout=600)
    finally:
        native.kill()
        native.wait()
    assert native_json.is_file(), f"the native runner wrote no results (exit {native.returncode}):\n{out[-4000:]}"
    ours, theirs = verdicts(native_json), verdicts(python_json)
    assert ours, "no verdict at all"
    assert sorted(ours - theirs) == [] and sorted(theirs - ours) == [], (
        f"native only: {sorted(ours - theirs)[:10]}\nverify only: {sorted(theirs - ours)[:10]}\n{out[-4000:]}"
    )
    assert native.returncode == code, out[-4000:]
    if port.passes:
        assert {status for _, _, status in ours} == {"pass"}, sorted(ours)
    closing = CLOSING.findall(out)
    assert closing and closing[-1][0] == port.lang, out[-2000:]
    assert tuple(int(n) for n in closing[-1][1:]) == case_counts(ours)
    results = json.loads(native_json.read_text())["results"]
    check_worst_elements(port.lang, results)
    if port.says:
        errors = [r["message"] for r in results if r["status"] == "error"]
        assert errors and all(f"r raised: self_attention: {port.says}" in m for m in errors) and port.says in out


def test_the_sample_catches_and_spares_what_the_kit_says() -> None:
    # The sample is not all controls or all bugs: the equality above covers passing, failing,
    # erroring and missing verdicts (the seed ports error and miss; mutants fail and pass).
    sampled = [m for m in mutation.load_mutants() if any(p.mutant == m.id for p in PORTS)]
    assert {m.lang for m in sampled} == {"r", "julia"}
    assert {m.expect for m in sampled} == {"killed", "passes"}


# ---------------------------------------------------------------- from an unpacked wheel


def test_an_unpacked_wheel_runs_both_runners_with_its_own_fixtures(installed_tool, tmp_path: Path) -> None:
    # An R-only or Julia-only team needs no Python: the wheel is a zip holding the runners, the
    # worker code they share, the fixtures and their index. Unpack, run, from a folder of its own.
    # The port declares softmax and self_attention but defines no self_attention: softmax passes,
    # self-attention is an error (a broken promise), attention is missing (not declared).
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(installed_tool.wheel).extractall(unpacked)
    fixtures = unpacked / "attention_ports" / "_assets" / "fixtures"
    # A port declaring a precision is judged on its tier, which the wheel ships with its index.
    shipped_tiers = {p.parent.name for p in (fixtures / "precision").glob("*/index.tsv")}
    assert shipped_tiers == {f.dirname for f in lower_formats()}
    user = tmp_path / "user"
    user.mkdir()
    for lang, port in (("r", "declares_undefined.R"), ("julia", "declares_undefined.jl")):
        shutil.copy(USER_PORTS / lang / port, user / port)
        runner = unpacked / "attention_ports" / "_assets" / "ports" / lang / RUNNERS[lang].name
        junit, out = user / f"{lang}.xml", user / f"{lang}.json"
        cases = ("--case", "softmax_ties", "--case", "self_attn_L1", "--case", "sdpa_L1_d1")
        proc = subprocess.run(
            native_command(lang, runner, Path(port), "--junit", str(junit), "--json", str(out), *cases),
            cwd=user,
            capture_output=True,
            text=True,
            check=False,
        )
        assert f"case(s) from {fixtures}" in proc.stdout, proc.stdout + proc.stderr
        assert proc.returncode == 1 and f"{lang} conformance: 1 passed, 1 failed, 1 missing" in proc.stdout
        statuses = {(r["case"], r["status"]) for r in json.loads(out.read_text())["results"]}
        assert statuses == {("softmax_ties", "pass"), ("self_attn_L1", "error"), ("sdpa_L1_d1", "missing")}
        sep = "$" if lang == "r" else "."
        message = next(r["message"] for r in json.loads(out.read_text())["results"] if r["status"] == "error")
        assert f"self_attention is declared in attention_ports{sep}operations of " in message
        suites = junit.read_text()
        assert suites.count("<testcase ") == 3 and suites.count("<skipped ") == 1 and suites.count("<error ") == 1
        assert f'<testsuite name="{lang}.softmax" tests="1" failures="0" errors="0" skipped="0"' in suites


# ---------------------------------------------------------------- conventions and bad input


@pytest.fixture
def fixtures_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "fixtures"
    shutil.copytree(REPO_FIXTURES, dst)
    return dst


def _reindex(root: Path) -> None:
    """Rewrite root's index from its manifest, as `attention-ports generate` would."""
    manifest = read_manifest(root)
    files = {
        meta[key]: (root / meta[key]).read_bytes()
        for entry in manifest["cases"]
        for metas in [
            entry["inputs"],
            entry["expected"],
            *entry.get("masked_query", {}).get("expected", {}).values(),
        ]
        for meta in metas.values()
        for key in ("file", "bound_file")
        if key in meta
    }
    (root / fixture_index.INDEX).write_bytes(fixture_index.render(manifest, manifest_bytes(manifest), files))


MASKED = ("sdpa_fully_masked_row", "sdpa_all_masked")


def _drop_conventions(root: Path, case_id: str) -> None:
    """One case's per-convention files taken out of the manifest (as in fixtures made before
    conventions existed), and the index remade: only the fixtures' own (zeros) files remain."""
    manifest = read_manifest(root)
    entry = next(e for e in manifest["cases"] if e["id"] == case_id)
    del entry["masked_query"]
    (root / "manifest.json").write_bytes(manifest_bytes(manifest))
    _reindex(root)


@pytest.mark.parametrize("lang", ["r", "julia"])
def test_a_declared_convention_is_judged_by_its_own_expected_files(lang: str, fixtures_copy: Path, tmp_path) -> None:
    # declared_attention_only declares masked_query = "nan" (NaN rows where every key is masked).
    # With the shipped expected.<name>.nan.npy it passes a fully masked case; where the manifest
    # lists no convention files it is judged by the fixtures' own (zeros) and fails; softmax it
    # does not declare.
    ext = {"r": "R", "julia": "jl"}[lang]
    with_nan, without = MASKED
    _drop_conventions(fixtures_copy, without)
    out = tmp_path / "out.json"
    cases = ("--case", with_nan, "--case", without, "--case", "softmax_ties")
    proc = subprocess.run(
        native_command(
            lang,
            RUNNERS[lang],
            USER_PORTS / lang / f"declared_attention_only.{ext}",
            "--fixtures",
            str(fixtures_copy),
            "--json",
            str(out),
            *cases,
        ),
        capture_output=True,
        text=True,
        check=False,
    )
    assert "(masked_query = nan)" in proc.stdout
    statuses = {(r["case"], r["status"]) for r in json.loads(out.read_text())["results"]}
    assert (proc.returncode, statuses) == (1, {(with_nan, "pass"), (without, "fail"), ("softmax_ties", "missing")})


@pytest.mark.parametrize("lang", ["r", "julia"])
def test_bad_usage_and_bad_fixtures_are_named(lang: str, fixtures_copy: Path, tmp_path: Path) -> None:
    port = OURS[lang]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            native_command(lang, RUNNERS[lang], port, *args), capture_output=True, text=True, check=False
        )

    # A corrupted case file: that case is an error naming the file, the others still run; and a
    # glob that matches nothing is bad usage (exit 2), as for `verify`.
    victim = fixtures_copy / "cases" / "softmax_ties" / "input.x.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.write_bytes(bytes(data))
    out = tmp_path / "out.json"
    proc = run("--fixtures", str(fixtures_copy), "--case", "softmax_*", "--json", str(out))
    matching = sum(e["id"].startswith("softmax_") for e in iter_entries(REPO_FIXTURES))
    assert proc.returncode == 1 and f"{matching - 1} passed, 1 failed" in proc.stdout
    bad = [r for r in json.loads(out.read_text())["results"] if r["status"] != "pass"]
    assert [(r["case"], r["status"]) for r in bad] == [("softmax_ties", "error")]
    assert bad[0]["message"].startswith(f"case 'softmax_ties': fixture error: {victim}: ")
    nothing = run("--fixtures", str(fixtures_copy), "--case", "no_such_case*")
    assert nothing.returncode == 2 and f"no case in {fixtures_copy} matches no_such_case*" in nothing.stderr
    # A manifest the index does not describe (edited, or regenerated without its index): exit 2.
    manifest = fixtures_copy / "manifest.json"
    manifest.write_bytes(manifest.read_bytes() + b"\n")
    stale = run("--fixtures", str(fixtures_copy))
    assert stale.returncode == 2 and f"{fixtures_copy / 'index.tsv'}: does not describe {manifest}" in stale.stderr
    (fixtures_copy / "index.tsv").unlink()
    assert "no fixture index" in run("--fixtures", str(fixtures_copy)).stderr
    unknown = run("--frobnicate")
    assert unknown.returncode == 2 and "unknown option --frobnicate" in unknown.stderr


# ---------------------------------------------------------------- a declared precision


def _load_error(lang: str, raw: dict, where: Path) -> str:
    """What attention_ports/runtimes/declaration.py says of this declaration (the runners' wording)."""
    with pytest.raises(declaration.DeclarationError) as err:
        declaration.parse(raw, str(where), lang)
    return str(err.value)


@pytest.mark.parametrize(
    ("lang", "declared"),
    [("r", 'precision = "float32"'), ("r", 'precison = "float64"'), ("julia", 'precision = "float8"')],
)
def test_a_declared_precision_is_checked_with_declaration_pys_words(lang: str, declared: str, tmp_path: Path) -> None:
    # R may declare only float64 (tests/data/ports/r/declares_float32.R); Julia any of the formats;
    # a misspelt field lists precision among the fields. Every case is an error carrying
    # declaration.py's message, word for word.
    field, value = (part.strip().strip('"') for part in declared.split("="))
    if lang == "r" and value == "float32":
        port = USER_PORTS / "r" / "declares_float32.R"
        raw: dict = {"operations": ["softmax"], field: value}
    else:
        port, raw = tmp_path / f"port.{'R' if lang == 'r' else 'jl'}", {field: value}
        text = f"attention_ports <- list({declared})" if lang == "r" else f"const attention_ports = ({declared},)"
        port.write_text(text + "\n")
    out = tmp_path / "out.json"
    proc = subprocess.run(
        native_command(lang, RUNNERS[lang], port, "--case", "softmax_ties", "--json", str(out)),
        capture_output=True,
        text=True,
        check=False,
    )
    results = json.loads(out.read_text())["results"]
    expected = _load_error(lang, raw, port)
    assert proc.returncode == 1 and [r["status"] for r in results] == ["error"], proc.stdout + proc.stderr
    assert expected in results[0]["message"], (expected, results[0]["message"])


@pytest.mark.parametrize("lang", ["r", "julia"])
def test_a_fixtures_folder_of_another_precision_is_bad_usage(lang: str) -> None:
    # Julia: our float32-declared port on the main (float64) fixtures is told to use its tier. R
    # (double only) on a tier's folder is told to use the main fixtures.
    port = USER_PORTS / "julia" / "ours_float32.jl" if lang == "julia" else OURS["r"]
    folder = REPO_FIXTURES if lang == "julia" else fixtures_dir("float32")
    proc = subprocess.run(
        native_command(lang, RUNNERS[lang], port, "--fixtures", str(folder), "--case", "softmax_ties"),
        capture_output=True,
        text=True,
        check=False,
    )
    says = {
        "julia": f"is for precision float64 (its index.tsv), but {port} declares precision = float32: use its tier, "
        "<fixtures>/precision/float32",
        "r": "these are the float32 tier's fixtures; R computes in double only",
    }[lang]
    assert proc.returncode == 2 and says in proc.stderr, proc.stdout + proc.stderr


ONE_ENTRY_CATALOGUE = """\
format_version = 2
seed = 20261125

[[case]]
id = "adamw_one_entry"
op = "adamw_step"
reason = "a parameter vector of one entry: R returns it as a number, both R runners give it back length 1"
inputs.param = {normal = [1]}
inputs.grad = {normal = [1]}
inputs.m = {normal = [1], scale = 0.3}
inputs.v = {uniform = [1], low = 0.1, high = 1.0}
options.step = 3

[[case]]
id = "adamw_one_by_one"
op = "adamw_step"
reason = "a 1 x 1 matrix: R keeps its dim, so it stays 1 x 1"
inputs.param = {normal = [1, 1]}
inputs.grad = {normal = [1, 1]}
inputs.m = {normal = [1, 1], scale = 0.3}
inputs.v = {uniform = [1, 1], low = 0.1, high = 1.0}
options.step = 3
"""


def test_a_length_one_result_takes_the_inputs_shape_in_both_r_runners(tmp_path: Path) -> None:
    # R has no 0-D/1-D distinction for a length-1 vector: the native runner settles it as the
    # adapter does (attention_ports/runtimes/r/adapter.py, _length_one_shape), from the input's shape.
    catalogue = tmp_path / "catalogue.toml"
    catalogue.write_text(ONE_ENTRY_CATALOGUE)
    folder = tmp_path / "fixtures"
    generate(folder, catalogue, workers=1)
    shutil.copytree(REPO_FIXTURES / "readers", folder / "readers")  # the runners' .npy readers
    native_json, python_json = tmp_path / "native.json", tmp_path / "verify.json"
    proc = subprocess.run(
        native_command("r", RUNNERS["r"], OURS["r"], "--fixtures", str(folder), "--json", str(native_json)),
        capture_output=True,
        text=True,
        check=False,
    )
    code = cli.main(["verify", "--impl", "r", "--dir", str(folder), "--json", str(python_json), "--quiet"])
    ours, theirs = verdicts(native_json), verdicts(python_json)
    assert (
        ours == theirs == {(c, o, "pass") for c in ("adamw_one_entry", "adamw_one_by_one") for o in ("param", "m", "v")}
    ), proc.stdout + proc.stderr
    assert proc.returncode == code == 0
