"""Ports run as commands (``--port NAME=PROGRAM``): the C and Python kits' walkthrough ports pass
every case of their three operations through the one pipeline, ``check-port`` finds nothing wrong
with them and names what is wrong with a broken kit, and a port that hangs, crashes mid-reply or
writes garbage where a reply belongs costs only its own case: the next cases pass, and no process
is left behind (test_faults.py: the fault suite on two kits).

Cheap by design: the C programs are compiled once per session (~0.3 s); each port starts in
milliseconds, so these tests take a few seconds in all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attention_ports import cli
from attention_ports.core import paths
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.runner import run_suite
from attention_ports.runtimes import declaration, protocol, registry
from attention_ports.runtimes.command import check
from attention_ports.runtimes.command.adapter import COMMAND_FIELDS, LAYOUTS, CommandImplementation
from attention_ports.runtimes.impl import ImplementationUnavailable
from attention_ports.spec import pairing
from attention_ports.spec import precision as formats
from attention_ports.spec.conventions import CONVENTIONS
from tests.conftest import require

KITS = paths.PORTS / "kits"
# Every case of softmax, scaled_dot_product_attention and multi_head_attention.
THREE_OPS = ["softmax_*", "sdpa_*", "mha_*", "seed002_masked_softmax", "seed002_*_shape", "seed001_mha_*"]
N_CASES = 63
N_CASES_FLOAT32 = 67  # the float32 tier: the same operations' cases that certify there, and its own bands


def compile_c(source: Path, out: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        require("cc", "no C compiler on PATH (apt-get install gcc)")
    subprocess.run(
        [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{KITS / 'c'}", "-o", str(out), str(source), "-lm"],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def c_port(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_c(KITS / "c" / "example" / "port.c", tmp_path_factory.mktemp("c-kit") / "port")


PY_PORT = KITS / "python" / "example" / "port.py"


def statuses(port: Path, name: str) -> dict[str, str]:
    results = run_suite(REPO_FIXTURES, [name], {name: port}, THREE_OPS, required={name}, progress=None)
    return {r.case: r.status for r in results}


def test_the_c_kit_port_passes_every_case_of_its_three_operations(c_port: Path) -> None:
    got = statuses(c_port, "c")
    assert len(got) == N_CASES
    assert set(got.values()) == {"pass"}, {k: v for k, v in got.items() if v != "pass"}


def test_the_c_kit_header_compiles_as_cpp(tmp_path: Path) -> None:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        require("c++", "no C++ compiler on PATH")
    subprocess.run(
        [
            cxx,
            "-x",
            "c++",
            "-Wall",
            "-Werror",
            f"-I{KITS / 'c'}",
            "-fsyntax-only",
            str(KITS / "c" / "example" / "port.c"),
        ],
        check=True,
    )


def test_the_python_kit_port_passes_every_case_of_its_three_operations() -> None:
    got = statuses(PY_PORT, "py")
    assert len(got) == N_CASES
    assert set(got.values()) == {"pass"}, {k: v for k, v in got.items() if v != "pass"}


NODE_PORT = KITS / "node" / "example" / "port.toml"


def need_node() -> None:
    if shutil.which("node") is None:
        require("node", "node is not on PATH (apt-get install nodejs)")


def compile_rust(source: Path, out: Path) -> Path:
    rustc = shutil.which("rustc")
    if rustc is None:
        require("rustc", "rustc is not on PATH (apt-get install rustc)")
    subprocess.run(
        [rustc, "--edition", "2021", "-C", "opt-level=1", "-D", "warnings", "-o", str(out), str(source)], check=True
    )
    return out


@pytest.fixture(scope="session")
def rust_port(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_rust(KITS / "rust" / "example" / "port.rs", tmp_path_factory.mktemp("rust-kit") / "port")


def test_the_rust_kit_port_passes_every_case_of_its_three_operations_and_check_port(rust_port: Path) -> None:
    got = statuses(rust_port, "rs")
    assert len(got) == N_CASES
    assert set(got.values()) == {"pass"}, {k: v for k, v in got.items() if v != "pass"}
    report = check.check([str(rust_port)])  # one test: the compiled port is built on one xdist worker
    assert not report.failed and not [f for f in report.findings if f.level == "note"], report.findings


def test_the_javascript_kit_port_passes_every_case_of_its_three_operations() -> None:
    need_node()
    got = statuses(NODE_PORT, "js")
    assert len(got) == N_CASES
    assert set(got.values()) == {"pass"}, {k: v for k, v in got.items() if v != "pass"}


def test_a_command_port_declares_row_major_0_based_and_its_messages_say_so(c_port: Path) -> None:
    with CommandImplementation("c", c_port) as impl:
        assert impl.declared.layout == "row-major" and impl.declared.index_base == 0
        assert impl.declaration.operations == {"softmax", "scaled_dot_product_attention", "multi_head_attention"}
        view = impl.view("multi_head_attention", "weights")
        assert view is not None and view.language == "C"
        assert view.at((1, 2, 0)) == "weights[1, 2, 0]"  # the reference's own indices: 0-based, same axes
        out = impl.run("softmax", {"x": np.array([[0.0, np.log(3.0)]])}, {})
        np.testing.assert_allclose(out["y"], [[0.25, 0.75]], rtol=1e-15)


@pytest.mark.parametrize("port", ["c", "python", "javascript"])
def test_check_port_finds_nothing_wrong_with_the_kits_ports(port: str, c_port: Path) -> None:
    if port == "javascript":
        need_node()
    argv, folder = check.resolve([str({"c": c_port, "python": PY_PORT, "javascript": NODE_PORT}[port])])
    report = check.check(argv, folder=folder)
    lines = [f.line() for f in report.findings]
    assert not report.failed, "\n".join(lines)
    echoed = [f for f in report.findings if f.probe.startswith("echo ")]
    assert len(echoed) == 21 and all(f.level == "ok" for f in echoed)  # every value type, bit for bit
    assert {f.probe for f in report.findings} >= {
        "greeting",
        "missing operation",
        "error",
        "malformed body",
        "not a frame",
        "quit",
    }


def test_check_port_names_a_kit_that_turns_0d_arrays_into_1d(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the Python kit's own first bug: np.ascontiguousarray makes a 0-D result 1-D
    broken = tmp_path / "broken.py"
    broken.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(KITS / 'python')!r})\n"
        "import numpy as np\nimport attention_port as k\n"
        "_array = k._array\n"
        "k._array = lambda a: _array(np.ascontiguousarray(a))\n"
        "k.serve({'softmax': lambda x: x})\n"
    )
    assert cli.main(["check-port", str(broken)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  echo f64_0d: shape (1,)" in out and "ok    echo f64_matrix: round-tripped bit for bit" in out


def test_a_bad_port_name_or_program_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "port.txt"
    text.write_text("not a program")
    for arg in ("torch=" + str(text), "c=" + str(text), "C=" + str(text)):
        with pytest.raises(SystemExit) as exc:
            cli.main(["verify", "--port", arg])
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not an executable program, a .py file or a .toml manifest" in err
    manifest = tmp_path / "port.toml"
    manifest.write_text('command = ["./port"]\nbiuld = ["make"]\n')
    with pytest.raises(SystemExit):
        cli.main(["verify", "--port", f"c={manifest}"])
    assert "unknown field(s) 'biuld'" in capsys.readouterr().err


def test_a_manifest_builds_its_port_and_a_failed_build_says_why(tmp_path: Path) -> None:
    shutil.copy(KITS / "c" / "example" / "port.c", tmp_path / "port.c")
    (tmp_path / "port.toml").write_text(
        f'language = "c"\nbuild = ["cc", "-std=c99", "-I{KITS / "c"}", "-o", "port", "port.c", "-lm"]\n'
        'command = ["./port"]\n'
    )
    with registry.create("mine", tmp_path / "port.toml") as impl:
        assert "C kit walkthrough port" in impl.describe()
    (tmp_path / "port.c").write_text("this is not C\n")
    with pytest.raises(ImplementationUnavailable, match=r"build step .* failed with exit code 1(.|\n)*port\.c"):
        registry.create("mine", tmp_path / "port.toml")


def test_the_machine_readable_protocol_is_the_implementation() -> None:
    doc = json.loads((paths.PACKAGE_DIR / "runtimes" / "protocol.json").read_text())
    assert doc["version"] == protocol.VERSION
    assert doc["frame"]["request_magic"].encode() == protocol.REQUEST_MAGIC
    assert doc["frame"]["reply_magic"].encode() == protocol.REPLY_MAGIC
    assert doc["frame"]["header_bytes"] == protocol.HEADER.size
    limits = doc["limits"]
    assert (limits["max_ndim"], limits["max_reply_bytes"], limits["max_text_kept"]) == (
        protocol.MAX_NDIM,
        protocol.MAX_REPLY_BYTES,
        protocol.MAX_TEXT,
    )
    assert limits["max_reply_bytes_env"] == protocol.MAX_REPLY_ENV
    # every tag the document lists decodes (its smallest value), and no other tag does
    sizes = {"B": 1, "I": 8, "F": 8, "f": 4, "h": 2, "b": 2, "S": 4, "T": 4, "V": 4, "X": 4, "N": 0}
    arrays = {t.decode(): d.itemsize for t, d in protocol._ARRAY_TAGS.items()}
    assert {t for t, v in doc["values"].items() if v["payload"][:1] == ["u8 ndim"]} == set(arrays)
    for tag in map(chr, range(33, 127)):
        body = tag.encode() + (bytes([0]) + bytes(arrays[tag]) if tag in arrays else bytes(sizes.get(tag, 0)))
        reader = protocol.Reader(body)
        if tag in doc["values"]:
            reader.value()
            reader.finish()
        else:
            with pytest.raises(protocol.ProtocolError, match="unknown value tag"):
                reader.value()
    assert set(doc["replies"]) == {"H", "L", "R", "T", "M", "E"}
    fields = doc["declaration"]["fields"]
    assert set(fields) == set(declaration.FIELDS) | set(COMMAND_FIELDS)
    assert doc["declaration"]["command_only"] == list(COMMAND_FIELDS)
    assert fields["precision"]["enum"] == list(formats.FORMATS)
    assert fields["masked_query"]["enum"] == list(CONVENTIONS)
    assert fields["rope_pairing"]["enum"] == list(pairing.PAIRINGS)
    assert fields["layout"]["enum"] == list(LAYOUTS)
    assert doc["echo"]["operation"] == protocol.ECHO_OP


def test_a_failure_is_told_in_the_command_ports_language_layout_and_index_base(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"  # the Python kit's port with one attention weight off by 1e-6
    source = PY_PORT.read_text().replace("weights[dead] = 0.0", "weights[dead] = 0.0\n    weights[0, -1] += 1e-6")
    bad.write_text(source.replace("Path(__file__).resolve().parent.parent", repr(str(KITS / "python"))))
    (result,) = run_suite(REPO_FIXTURES, ["py"], {"py": bad}, ["sdpa_nq3_nk7_dk5_dv2"], required={"py"}, progress=None)
    weights = next(o for o in result.outputs if o.output == "weights")
    assert weights.status == "fail"
    assert "as the port sees it (Python, 0-based): weights is (3, 7) (query x key)" in weights.message
    assert "worst at weights[0, 6]:" in weights.message


def test_a_command_port_declaring_float32_is_sent_float32_and_judged_on_that_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = tmp_path / "f32.py"  # the Python kit's port, declaring float32 and refusing anything else
    source = PY_PORT.read_text().replace("Path(__file__).resolve().parent.parent", repr(str(KITS / "python")))
    source = source.replace("def softmax(x):\n", "def softmax(x):\n    assert x.dtype == np.float32, x.dtype\n")
    port.write_text(source.replace("description=f", 'precision="float32", description=f'))
    run = ["verify", "--port", f"py={port}", "--case", "softmax_ties", "--case", "sdpa_L2_d3"]
    assert cli.main(run) == 0, capsys.readouterr().out  # judged on the float32 tier, as declared
    assert "verdict: PASS" in capsys.readouterr().out
    # the same port judged at float64 fails: it computes in float32 (SDPA's scores included)
    assert cli.main([*run, "--precision", "float64"]) == 1
    assert "verdict: FAIL: 2 of 2 cases fail" in capsys.readouterr().out


def test_the_rust_kit_float32_port_passes_every_float32_case_of_its_three_operations_and_fails_at_float64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = compile_rust(KITS / "rust" / "example32" / "port.rs", tmp_path / "port32")
    report = tmp_path / "r.json"
    cases = [x for glob in THREE_OPS for x in ("--case", glob)]
    assert cli.main(["verify", "--quiet", "--port", f"rs32={port}", *cases, "--json", str(report)]) == 0
    doc = json.loads(report.read_text())
    statuses = {c["case"]: c["status"] for c in doc["cases"]}
    assert len(statuses) == N_CASES_FLOAT32 and set(statuses.values()) == {"pass"}, statuses
    # judged on the tier it declares: its fixtures, and its own float32 band cases among them
    assert all("--dir " in c["repro"] and "fixtures/precision/float32" in c["repro"] for c in doc["cases"])
    assert {"softmax_f32_exp_overflow_band", "sdpa_f32_exp_underflow_band"} <= set(statuses)
    capsys.readouterr()
    # the same port judged at float64 fails: its arithmetic is single precision throughout
    two = ["--case", "softmax_random_3x5", "--case", "sdpa_L2_d3"]
    assert cli.main(["verify", "--port", f"rs32={port}", *two, "--precision", "float64"]) == 1
    assert "verdict: FAIL: 2 of 2 cases fail" in capsys.readouterr().out


def test_init_c_writes_a_skeleton_that_verifies_as_missing_then_passes_softmax_once_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)  # a skeleton passes nothing: under CI=true that fails the run
    path = tmp_path / "mine.c"
    assert cli.main(["init", "c", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention_port.h", "mine.c", "mine.toml"]
    assert cli.main(["init", "c", str(path)]) == 2  # never overwritten
    manifest = tmp_path / "mine.toml"
    capsys.readouterr()
    assert cli.main(["verify", "--quiet", "--port", f"c={manifest}", "--case", "softmax_ties"]) == 0
    assert "c: 1 missing" in capsys.readouterr().out
    # softmax written (the walkthrough port's) and listed: its cases pass
    example = (KITS / "c" / "example" / "port.c").read_text()
    body = example[example.index("static void softmax_rows") : example.index("/* One head:")]  # + softmax
    text = path.read_text()
    stub = text[text.index("int softmax(ap_call") : text.index("// scaled_dot_product_attention(")]
    text = text.replace(stub, body).replace('// {"softmax", softmax},', '{"softmax", softmax},')
    path.write_text(text)
    two = ["--case", "softmax_ties", "--case", "softmax_fully_masked_row"]
    assert cli.main(["verify", "--quiet", "--port", f"c={manifest}", *two]) == 0
    assert "verdict: PASS" in capsys.readouterr().out


def test_the_c_toolchain_is_known_to_setup_and_doctor() -> None:
    from attention_ports.tools import doctor, installers

    argv, _ = installers.command("c")
    assert argv[0] == "bash" and Path(argv[1]).name == "install_c.sh" and Path(argv[1]).is_file()
    found = doctor.check_c()
    assert found.need == "c" and found.fix == "attention-ports setup c"
    assert found.ok == (shutil.which("cc") is not None or shutil.which("gcc") is not None)


def test_a_command_port_is_in_every_report_format(c_port: Path, tmp_path: Path) -> None:
    reports = {"--json": "r.json", "--junit": "r.xml", "--markdown": "r.md", "--html": "r.html"}
    args = [x for flag, name in reports.items() for x in (flag, str(tmp_path / name))]
    assert cli.main(["verify", "--port", f"c={c_port}", "--case", "sdpa_L2_d3", *args]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["meta"]["implementations"] == ["c"] and doc["meta"]["ports"] == {"c": str(c_port)}
    assert [(c["impl"], c["case"], c["status"]) for c in doc["cases"]] == [("c", "sdpa_L2_d3", "pass")]
    junit = (tmp_path / "r.xml").read_text()
    assert 'classname="attention_ports.c.scaled_dot_product_attention" name="sdpa_L2_d3"' in junit
    assert "| c | 1 | 0 | 0 | 0 | 0 |" in (tmp_path / "r.md").read_text()
    assert "sdpa_L2_d3" in (tmp_path / "r.html").read_text()
