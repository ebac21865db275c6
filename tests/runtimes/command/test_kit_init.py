"""``init rust|javascript|python``, ``setup`` and ``doctor --need`` for the Rust, JavaScript and
Python kits, as test_command.py and test_octave_kit.py check them for C and Octave: a fresh skeleton
verifies as all-missing; with softmax written (the walkthrough port's) and listed, it passes softmax.

Cheap: one softmax case, then two; the Rust skeleton is built once per verify by its manifest's
rustc step (~3 s each); node and this Python start in well under a second.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from attention_ports import cli
from attention_ports.tools import doctor, installers
from tests.conftest import require
from tests.runtimes.command.test_command import KITS, need_node
from tests.wheel_env import ROOT

# language: (port file, what verify is given, the example's softmax (start, end), the stub's (start, end), listing)
KIT = {
    "rust": (
        "mine.rs",
        "mine.toml",
        KITS / "rust" / "example" / "port.rs",
        ("/// Along the last axis", "/// One head over"),
        ("fn softmax(_c: &Call)", "// scaled_dot_product_attention("),
        ('// ("softmax", softmax),', '("softmax", softmax),'),
    ),
    "javascript": (
        "mine.js",
        "mine.toml",
        KITS / "node" / "example" / "port.js",
        ("// Along the last axis", "// One head over"),
        ("function softmax(a) {", "// scaled_dot_product_attention("),
        ("// softmax,", "softmax,"),
    ),
    "python": (
        "mine.py",
        "mine.py",
        KITS / "python" / "example" / "port.py",
        ("def softmax(x):", "def scaled_dot_product_attention"),
        ("def softmax(x):", "# scaled_dot_product_attention("),
        ('# "softmax": softmax,', '"softmax": softmax,'),
    ),
}
KIT_FILE = {"rust": "attention_port.rs", "javascript": "attention_port.js", "python": "attention_port.py"}
TOOL = {"rust": "rustc", "javascript": "node", "python": None}


@pytest.mark.parametrize("lang", sorted(KIT))
def test_init_writes_a_kit_skeleton_that_verifies_as_missing_then_passes_softmax_once_written(
    lang: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)  # a skeleton passes nothing: under CI=true that fails the run
    file, target, example, (e0, e1), (s0, s1), (listed_not, listed) = KIT[lang]
    path = tmp_path / file
    assert cli.main(["init", lang, str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({file, target, KIT_FILE[lang]})
    assert cli.main(["init", lang, str(path)]) == 2  # never overwritten
    assert cli.main(["init", lang, str(tmp_path / "port.txt")]) == 2  # the wrong extension
    assert cli.main(["init", lang, "--precision", "float32", str(tmp_path / f"p{path.suffix}")]) == 2
    if lang == "rust" and shutil.which("rustc") is None:
        require("rustc", "rustc is not on PATH (attention-ports setup rust)")
    if lang == "javascript":
        need_node()
    port = f"{lang}={tmp_path / target}"
    capsys.readouterr()
    assert cli.main(["verify", "--quiet", "--port", port, "--case", "softmax_ties"]) == 0
    assert f"{lang}: 1 missing" in capsys.readouterr().out
    # softmax written (the walkthrough port's) and listed: its cases pass
    source = example.read_text()
    body = source[source.index(e0) : source.index(e1)]
    text = path.read_text()
    stub = text[text.index(s0) : text.index(s1)]
    assert text.count(listed_not) == 1
    path.write_text(text.replace(stub, body + "\n").replace(listed_not, listed))
    two = ["--case", "softmax_ties", "--case", "softmax_fully_masked_row"]
    assert cli.main(["verify", "--quiet", "--port", port, *two]) == 0
    assert "verdict: PASS" in capsys.readouterr().out


@pytest.mark.parametrize("lang", sorted(KIT))
def test_the_kits_toolchain_is_known_to_setup_doctor_and_the_tests_installer(lang: str) -> None:
    argv, _ = installers.command(lang)
    script = Path(argv[1])
    assert argv[0] == "bash" and script.name == f"install_{lang}.sh" and script.is_file()
    assert lang in doctor.NEEDS and lang not in doctor.DEFAULT_NEEDS  # only with --need LANG
    found = {"rust": doctor.check_rust, "javascript": doctor.check_javascript, "python": doctor.check_python_kit}[
        lang
    ]()
    assert found.need == lang
    tool = TOOL[lang]
    if tool is None:  # the Python kit: NumPy in this Python, which the suite itself needs
        assert found.ok and "NumPy " in found.detail, found
    else:
        assert found.fix == f"attention-ports setup {lang}"
        assert found.ok == (shutil.which(tool) is not None), found
        if found.ok:
            assert found.detail.startswith("rustc 1." if lang == "rust" else "Node v"), found.detail
        assert f"install_{lang}.sh" in (script.parent / "install_kits.sh").read_text()  # the tests' set-up


CI_KITS = ROOT / "examples" / "ci" / "kit-ports.yml"
SOURCE = {"c": ".c", "rust": ".rs", "javascript": ".js", "python": ".py"}
# Each `attention-ports` command a step runs, recorded (NUL-separated arguments, one file a command)
# by a bash function of that name instead of run: the steps' own shell expands their variables.
_RECORD = 'n=0; attention-ports() { n=$((n + 1)); printf "%s\\0" "$@" > "$RECORD.$n"; }; python() { :; }\n'


def test_the_kit_ports_ci_example_runs_commands_our_cli_accepts_on_ports_init_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/ci/kit-ports.yml: valid YAML, one matrix job per kit (C, Rust, JavaScript, Python),
    and each `run:` step's attention-ports commands, expanded by bash with the job's environment
    as GitHub sets it, parsed by our command line (the setup and doctor names, verify's --port on
    the files `init` writes). Nothing is installed or run: the Octave example's test runs its steps."""
    doc = yaml.safe_load(CI_KITS.read_text())
    (job,) = doc["jobs"].values()
    entries = job["strategy"]["matrix"]["include"]
    assert [e["kit"] for e in entries] == ["c", "rust", "javascript", "python"]
    monkeypatch.chdir(tmp_path)
    parser = cli.build_parser()
    for entry in entries:
        assert cli.main(["init", entry["kit"], str(Path(entry["port"]).with_suffix(SOURCE[entry["kit"]]))]) == 0
        env = {
            k: v.replace("${{ matrix.kit }}", entry["kit"]).replace("${{ matrix.port }}", entry["port"])
            for k, v in {**doc["env"], **job["env"]}.items()
        }
        assert all("${{" not in v for v in env.values()), env
        record = tmp_path / f"{entry['kit']}.cmd"
        commands: list[list[str]] = []
        for step in (s for s in job["steps"] if "run" in s):
            assert "${{" not in step["run"], step
            script = _RECORD + step["run"]
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                env={"PATH": "/usr/bin:/bin", "CI": "true", "RECORD": str(record), **env},
                capture_output=True,
                text=True,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            for made in sorted(tmp_path.glob(f"{record.name}.*"), key=lambda p: int(p.suffix[1:])):
                commands.append(made.read_bytes().decode().split("\0")[:-1])
                made.unlink()
        assert [c[0] for c in commands] == ["setup", "doctor", "check-port", "verify"], commands
        for argv in commands:
            args = parser.parse_args(argv)  # an unknown LANG or option, or a missing port file: SystemExit
            assert args.command == argv[0]
        assert commands[0] == ["setup", entry["kit"]] and commands[1] == ["doctor", "--need", entry["kit"]]
        verify = commands[3]
        assert verify[verify.index("--port") + 1] == f"{entry['kit']}={entry['port']}"
