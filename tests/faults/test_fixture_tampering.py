"""A tampered fixture folder or catalogue: refused with the file and the field named, never read
blindly, never a traceback, never a wrong verdict (attention_ports/core/validate.py).

Each test tampers with a copy of the shipped fixtures the way an attacker (or an accident) would:
the manifest is rewritten *consistently* (the sha256 of a tampered file updated too), since the
manifest is exactly as untrusted as the files it lists. ``verify`` then exits 2 (bad input):
before running anything when the manifest itself is bad, after reporting the other cases when one
case's files are bad.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attention_ports import cli
from attention_ports.core import validate
from attention_ports.fixtures.store import REPO_FIXTURES, FixtureError, ManifestError, read_manifest
from attention_ports.judge.runner import load_cases, run_suite
from attention_ports.spec.catalogue import CatalogueError, load_catalogue

ROOT = Path(__file__).resolve().parents[2]
CASE = "softmax_random_3x5"  # inputs.x (3, 5), expected.y with its bound
OTHER = "softmax_ties"


@pytest.fixture
def fx(tmp_path: Path) -> Path:
    """The committed folder as the tests tamper with it: its manifest and catalogue whole, and the
    files of the two cases they run (a whole copy, ~7,000 files, took ~0.7 s a test). The manifest
    still names every case: it is validated as a whole before any file is read, and the runs
    select CASE and OTHER."""
    dst = tmp_path / "fixtures"
    top_only = {"cases", "precision"}  # every other file and folder is copied whole
    shutil.copytree(REPO_FIXTURES, dst, ignore=lambda d, names: top_only if Path(d) == REPO_FIXTURES else set())
    for case in (CASE, OTHER):
        shutil.copytree(REPO_FIXTURES / "cases" / case, dst / "cases" / case)
    return dst


def edit_manifest(fx: Path, change: Callable[[dict], None]) -> None:
    manifest = json.loads((fx / "manifest.json").read_text())
    change(manifest)
    (fx / "manifest.json").write_text(json.dumps(manifest, indent=1))


def entry(manifest: dict, case_id: str = CASE) -> dict:
    return next(c for c in manifest["cases"] if c["id"] == case_id)


def index(case_id: str) -> int:
    return [c["id"] for c in read_manifest(REPO_FIXTURES)["cases"]].index(case_id)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def verify(fx: Path, capsys: pytest.CaptureFixture[str], *cases: str) -> tuple[int, str, str]:
    argv = ["verify", "--impl", "reference", "--dir", str(fx), "--quiet"]
    for c in cases or (CASE, OTHER):
        argv += ["--case", c]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def refused_before_running(code: int, out: str, err: str, *needles: str) -> None:
    assert code == cli.EXIT_BAD_INPUT, out + err
    assert out == ""  # nothing ran: no table, no summary
    for needle in needles:
        assert needle in err, (needle, err)


# --- paths ------------------------------------------------------------------------------------------
def test_a_path_leading_out_of_the_folder_is_refused_before_any_file_is_read(fx: Path, capsys) -> None:
    # A file outside the fixtures with the right bytes and hash: the old reader read it and passed.
    outside = fx.parent / "outside"
    outside.mkdir()
    good = fx / "cases" / CASE / "input.x.npy"
    shutil.copy(good, outside / "q.npy")
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(file="../../outside/q.npy"))
    code, out, err = verify(fx, capsys)
    refused_before_running(
        code,
        out,
        err,
        f"{fx / 'manifest.json'}: case '{CASE}' (cases[{index(CASE)}]), field 'inputs.x.file': "
        "'../../outside/q.npy' is not a relative path inside the fixture folder",
    )


def test_an_absolute_path_is_refused(fx: Path, capsys) -> None:
    target = str(fx / "cases" / CASE / "input.x.npy")  # even one that points inside
    edit_manifest(fx, lambda m: entry(m)["expected"]["y"].update(bound_file=target))
    code, out, err = verify(fx, capsys)
    refused_before_running(code, out, err, f"field 'expected.y.bound_file': {target!r} is not a relative path")


@pytest.mark.parametrize("where", ["outside", "/dev/zero"])
def test_a_symlink_leading_out_is_refused(fx: Path, capsys, where: str) -> None:
    victim = fx / "cases" / CASE / "input.x.npy"
    if where == "outside":
        target = fx.parent / "copy.npy"
        shutil.copy(victim, target)  # same bytes, same hash: only the link gives it away
    else:
        target = Path("/dev/zero")  # read until memory runs out, before
    victim.unlink()
    victim.symlink_to(target)
    code, out, err = verify(fx, capsys)
    refused_before_running(
        code,
        out,
        err,
        f"'cases/{CASE}/input.x.npy' leads outside the fixture folder {fx.resolve()} (to {target.resolve()}",
    )


def test_a_manifest_read_before_has_its_paths_checked_again_and_an_edited_one_its_text(fx: Path) -> None:
    # The text's own checks are remembered by its bytes (core/validate.read_manifest); what the
    # folder holds is not: the same bytes with a link leading out are refused, and so is the text
    # edited in place, at the same path, after it was accepted there.
    assert read_manifest(fx)["cases"]
    victim = fx / "cases" / CASE / "input.x.npy"
    target = fx.parent / "copy.npy"
    shutil.copy(victim, target)
    victim.unlink()
    victim.symlink_to(target)
    with pytest.raises(ManifestError, match=f"'cases/{CASE}/input.x.npy' leads outside the fixture folder"):
        read_manifest(fx)
    victim.unlink()
    shutil.copy(target, victim)
    assert read_manifest(fx)["cases"]
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(shape="3x5"))
    with pytest.raises(ManifestError, match=f"case '{CASE}' .*field 'inputs.x.shape': must be of type array"):
        read_manifest(fx)


def test_dev_zero_named_directly_is_refused(fx: Path, capsys) -> None:
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(file="/dev/zero"))
    code, out, err = verify(fx, capsys)
    refused_before_running(code, out, err, "field 'inputs.x.file': '/dev/zero' is not a relative path")


QUIET_ARGS = ["--case", CASE, "--case", OTHER, "--quiet"]


def test_a_fifo_or_device_inside_the_folder_is_never_opened_for_reading(fx: Path, tmp_path: Path) -> None:
    # A FIFO blocks a plain open() forever: the run must refuse it at once, in a fresh process
    # (a hang here fails by the timeout instead of hanging the suite).
    victim = fx / "cases" / CASE / "input.x.npy"
    victim.unlink()
    os.mkfifo(victim)
    proc = subprocess.run(
        [sys.executable, "-m", "attention_ports.cli", "verify", "--impl", "reference", "--dir", str(fx), *QUIET_ARGS],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == cli.EXIT_BAD_INPUT, proc.stdout + proc.stderr
    assert f"{victim}: not a regular file (a FIFO); refusing to read it" in proc.stdout
    assert "reference: 1 error, 1 pass" in proc.stdout  # the other case still ran


# --- sizes and headers ------------------------------------------------------------------------------
def test_a_header_claiming_a_huge_shape_is_that_cases_error_not_a_crash(fx: Path, capsys) -> None:
    # 16 bytes of data under a header that claims 10**15 float64s; the manifest's hash updated.
    victim = fx / "cases" / CASE / "input.x.npy"
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000000,), }"
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 16
    victim.write_bytes(data)
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(sha256=sha(data)))
    code, out, err = verify(fx, capsys)
    assert code == cli.EXIT_BAD_INPUT, out + err
    assert f"{victim}: its header says float64[1000000000000000], the manifest says float64[3, 5]" in out
    assert "reference: 1 error, 1 pass" in out


def test_a_manifest_agreeing_with_a_huge_header_is_refused_by_size(fx: Path, capsys) -> None:
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(shape=[10**15]))
    code, out, err = verify(fx, capsys)
    refused_before_running(
        code,
        out,
        err,
        f"field 'inputs.x.shape': [1000000000000000] of float64 is 8000000000000000 bytes, more than the "
        f"{validate.MAX_ARRAY_BYTES} a fixture array may have",
    )


def test_a_padded_file_is_refused_even_with_a_matching_hash(fx: Path, capsys) -> None:
    victim = fx / "cases" / CASE / "input.x.npy"
    data = victim.read_bytes() + b"\0" * 4096
    victim.write_bytes(data)
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(sha256=sha(data)))
    code, out, _ = verify(fx, capsys)
    assert code == cli.EXIT_BAD_INPUT
    assert f"{victim}: {len(data)} bytes, but its header (float64[3, 5]) needs exactly {len(data) - 4096}" in out


def test_a_pickle_or_object_array_is_refused(fx: Path, capsys) -> None:
    victim = fx / "cases" / CASE / "input.x.npy"
    buf = io.BytesIO()
    np.save(buf, np.array([[{"a": 1}] * 5] * 3, dtype=object), allow_pickle=True)
    victim.write_bytes(buf.getvalue())
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(sha256=sha(buf.getvalue())))
    code, out, _ = verify(fx, capsys)
    assert code == cli.EXIT_BAD_INPUT
    assert f"{victim}: not a readable .npy file: dtype '|O' is not one a fixture may hold" in out


# --- bounds -----------------------------------------------------------------------------------------
def _tamper_bound(fx: Path, values: Callable[[np.ndarray], np.ndarray], expected_shift: float = 0.0) -> Path:
    """Replace the case's bound (and optionally shift its expected values: a wrong 'truth'),
    updating the manifest's hashes as a careful attacker would."""
    case_dir = fx / "cases" / CASE
    bound = np.load(case_dir / "bound.y.npy")
    new_bound = npy(values(bound))
    (case_dir / "bound.y.npy").write_bytes(new_bound)
    expected = np.load(case_dir / "expected.y.npy")
    new_expected = npy(expected + expected_shift)
    (case_dir / "expected.y.npy").write_bytes(new_expected)

    def change(m: dict) -> None:
        entry(m)["expected"]["y"].update(sha256=sha(new_expected), bound_sha256=sha(new_bound))

    edit_manifest(fx, change)
    return case_dir / "bound.y.npy"


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (lambda b: np.full_like(b, np.nan), "holds nan at [0, 0]: every bound must be finite"),
        (lambda b: np.full_like(b, np.inf), "holds inf at [0, 0]: every bound must be finite"),
        (lambda b: -b, "at [0, 0]: a bound cannot be negative"),
        (lambda b: np.full_like(b, 1e6), "allows 1.000e+06 at [0, 0], more than 2^-20 of the case's largest |value|"),
        (lambda b: b * 1e9, "more than 2^-20 of the case's largest |value|"),
        (lambda b: np.zeros_like(b), "below 2^-46 of |expected|"),
    ],
    ids=["nan", "inf", "negative", "1e6", "times_1e9", "zero"],
)
def test_a_tampered_bound_is_refused(fx: Path, capsys, values, says: str) -> None:
    path = _tamper_bound(fx, values)
    code, out, _ = verify(fx, capsys)
    assert code == cli.EXIT_BAD_INPUT, out
    assert f"{path}: the bound of case '{CASE}', output 'y', " in out and says in out
    assert "reference: 1 error, 1 pass" in out


def test_a_loosened_bound_cannot_make_a_wrong_answer_pass(fx: Path, capsys) -> None:
    # The 'truth' shifted by 0.25 and the bound opened to 1.0: the reference now differs from the
    # stored values by 0.25, inside that bound. Without the range check this passed with exit 0.
    _tamper_bound(fx, lambda b: np.ones_like(b), expected_shift=0.25)
    code, out, _ = verify(fx, capsys)
    assert code == cli.EXIT_BAD_INPUT
    assert "reference: 1 error, 1 pass" in out  # the tampered case is an error, not a pass
    assert f"case '{CASE}': fixture error" in out and "more than 2^-20 of the case's largest |value|" in out


def test_the_bound_range_is_the_error_analysis_own() -> None:
    # validate.py restates three constants of bounds.py (it must not import the truth engine);
    # they must stay the same numbers.
    from attention_ports.truth import bounds

    assert validate.MAX_RELATIVE_BOUND == float(bounds.MAX_FIRST_ORDER.mid())
    assert validate.RESOLUTION == float(bounds.RESOLUTION.mid())
    assert validate.UNDERFLOW == float(bounds.UNDERFLOW.mid())


def test_every_shipped_bound_is_inside_the_range_with_room_to_spare() -> None:
    # The range check must never refuse a real bound. The loosest shipped one: gpt_large_near_constant
    # at 1.1e-8 of its case's scale (embeddings of mean 1000 and spread 0.5 through two blocks, whose
    # correct implementations themselves err by ~1e-11 relative), 85 times inside the 2^-20 ceiling;
    # every other case is ~4e-9 or less (gpt_grads_two_blocks 6e-10 since its backward's bound
    # carries the entering error by its sources: truth/transformer_grads.py).
    from attention_ports.fixtures.store import load_case

    worst = 0.0
    for e in read_manifest(REPO_FIXTURES)["cases"]:
        case = load_case(REPO_FIXTURES, e)  # raises if any bound is out of range
        scale = max(float(np.abs(x.array[np.isfinite(x.array)]).max(initial=0)) for x in case.expected.values())
        if scale:
            worst = max(worst, max(float(x.bound.max()) for x in case.expected.values()) / scale)
    assert worst < validate.MAX_RELATIVE_BOUND / 50


# --- wrongly typed manifest fields ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda m: entry(m)["inputs"]["x"].update(shape="3x5"), "field 'inputs.x.shape': must be of type array"),
        (lambda m: entry(m)["inputs"]["x"].update(dtype="object"), "field 'inputs.x.dtype': must be one of"),
        (lambda m: entry(m).update(flags="random"), "field 'flags': must be of type array, got 'random'"),
        (lambda m: entry(m).update(options={"scale": "big"}), "field 'options.scale': must be of type number"),
        (lambda m: entry(m)["expected"]["y"].update(rtol=1e6), "unknown field(s) 'rtol'"),
        (lambda m: entry(m)["expected"]["y"].update(atol=None), "unknown field(s) 'atol'"),
        (lambda m: entry(m).update(tolerances={"y": {"rtol": 1e6}}), "unknown field(s) 'tolerances'"),
        (lambda m: entry(m)["expected"]["y"].pop("bound_file"), "lacks the required field(s) 'bound_file'"),
        (lambda m: entry(m)["inputs"]["x"].update(sha256=5), "field 'inputs.x.sha256': must be of type string"),
        (lambda m: m.update(cases={"a": 1}), "field 'cases': must be of type array"),
        (lambda m: entry(m, OTHER).update(id=CASE), f"case id '{CASE}' appears twice"),
    ],
    ids=[
        "shape_str",
        "dtype_object",
        "flags_str",
        "option_str",
        "rtol",
        "atol",
        "tolerances",
        "no_bound",
        "sha_int",
        "cases_dict",
        "duplicate_id",
    ],
)
def test_a_wrongly_typed_manifest_is_refused_naming_the_field(fx: Path, capsys, change, says: str) -> None:
    edit_manifest(fx, change)
    code, out, err = verify(fx, capsys)
    refused_before_running(code, out, err, str(fx / "manifest.json"), says)


def test_nan_in_the_manifest_is_not_json(fx: Path, capsys) -> None:
    text = (fx / "manifest.json").read_text().replace('"options": {}', '"options": {"scale": NaN}', 1)
    (fx / "manifest.json").write_text(text)
    code, out, err = verify(fx, capsys)
    refused_before_running(code, out, err, "manifest.json: not valid JSON: NaN is not JSON")


def test_a_huge_or_special_manifest_is_refused(fx: Path, capsys) -> None:
    (fx / "manifest.json").unlink()
    (fx / "manifest.json").symlink_to("/dev/zero")
    code, out, err = verify(fx, capsys)
    refused_before_running(code, out, err, "manifest.json: not a regular file (a character device)")


def test_check_fixtures_refuses_a_malformed_manifest_as_bad_input(fx: Path, capsys) -> None:
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(file="../x.npy"))
    assert cli.main(["check-fixtures", "--dir", str(fx)]) == cli.EXIT_BAD_INPUT
    assert "'../x.npy' is not a relative path inside the fixture folder" in capsys.readouterr().err


def test_run_suite_raises_the_named_error_for_library_users(fx: Path) -> None:
    edit_manifest(fx, lambda m: entry(m)["inputs"]["x"].update(file="/etc/passwd.npy"))
    with pytest.raises(FixtureError, match=r"'/etc/passwd\.npy' is not a relative path"):
        run_suite(fx, ["reference"])


def test_cases_loaded_once_are_read_only_and_a_tampered_one_is_still_its_own_error(fx: Path) -> None:
    # run_suite(loaded=...) (the mutation kit's and the repeated runs' cases, read once): a case
    # whose file was tampered with is left out of load_cases and read by each run, which reports
    # it as that case's fixture error; the others give what reading them afresh gives, and no
    # run can write into the arrays the next one is handed.
    victim = fx / entry(read_manifest(fx))["inputs"]["x"]["file"]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.write_bytes(bytes(data))
    entries = [e for e in read_manifest(fx)["cases"] if e["id"] in (CASE, OTHER)]
    loaded = load_cases(fx, entries)
    assert list(loaded) == [OTHER]
    case = loaded[OTHER]
    for arr in (*case.inputs.values(), *(a for e in case.expected.values() for a in (e.array, e.bound))):
        with pytest.raises(ValueError, match="read-only"):
            arr[...] = 0.0

    def rows(results: list) -> list:
        return [
            (r.case, r.status, r.fixture_error, [(o.output, o.status, o.message) for o in r.outputs]) for r in results
        ]

    fresh = run_suite(fx, ["reference"], case_globs=[CASE, OTHER])
    again = run_suite(fx, ["reference"], case_globs=[CASE, OTHER], loaded=loaded)
    assert rows(again) == rows(fresh)
    assert {r.case: r.status for r in again} == {CASE: "error", OTHER: "pass"}
    assert f"{victim}: sha256 does not match the manifest" in next(r for r in again if r.case == CASE).fixture_error


# --- the catalogue ----------------------------------------------------------------------------------
CATALOGUE_EDITS = [
    (
        'flags = ["seed", "published"]',
        'flags = "seed"',
        "case 'seed000_four_words', field 'flags': must be of type array",
    ),
    ("options.num_heads = 4", 'options.num_heads = "4"', "field 'options.num_heads': must be of type integer, got '4'"),
    ("seed = 20261123", "seed = true", "top-level 'seed' must be an integer"),
    (
        "inputs.x = {literal = [[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]]}",
        'inputs.x = {literal = [[1, 0, 0], [0, "a", 0], [1, 1, 0], [0, 0, 1]]}',
        "field 'inputs.x.literal[1][1]'",
    ),
    (
        "inputs.x = {literal = [[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]]}",
        "inputs.x = {normal = [100000, 100000]}",
        "field 'inputs.x': 10000000000 elements, more than the 16777216 one generated input may have",
    ),
    (
        "inputs.x = {literal = [[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]]}",
        "inputs.x = {normal = [4, 3], scael = 2.0}",
        "field 'inputs.x': unknown field(s) 'scael'",
    ),
    ('id = "seed000_four_words"', "id = 7", "case #1, field 'id': must be of type string, got 7"),
]


@pytest.mark.parametrize(("old", "new", "says"), CATALOGUE_EDITS, ids=[e[2][:30] for e in CATALOGUE_EDITS])
def test_a_wrongly_typed_catalogue_is_a_named_error(tmp_path: Path, old: str, new: str, says: str) -> None:
    text = (REPO_FIXTURES / "catalogue.toml").read_text()
    assert old in text
    cat = tmp_path / "catalogue.toml"
    cat.write_text(text.replace(old, new, 1))
    with pytest.raises(CatalogueError) as info:
        load_catalogue(cat)
    assert says in str(info.value) and str(cat) in str(info.value)


def test_generate_and_check_exit_2_on_a_bad_catalogue(fx: Path, capsys) -> None:
    cat = fx / "catalogue.toml"
    cat.write_text(cat.read_text().replace("options.num_heads = 4", 'options.num_heads = "four"', 1))
    assert cli.main(["generate", "--out", str(fx)]) == cli.EXIT_BAD_INPUT
    assert "field 'options.num_heads': must be of type integer, got 'four'" in capsys.readouterr().err
    assert cli.main(["check-fixtures", "--dir", str(fx)]) == cli.EXIT_BAD_INPUT
    assert "field 'options.num_heads'" in capsys.readouterr().err


def test_a_catalogue_that_is_a_device_is_refused(tmp_path: Path) -> None:
    cat = tmp_path / "catalogue.toml"
    cat.symlink_to("/dev/zero")
    with pytest.raises(CatalogueError, match="not a regular file"):
        load_catalogue(cat)
