"""Issue 27's new-user trial: a C port written from docs/protocol.md and the C kit's header alone
(``tests/data/ports/c/newuser/``; docs/protocol.md, "A port written from these docs alone") passes
every case of its five operations, built by its own manifest with the docs' build line.

The trial's first run failed to build: the header did not compile under ``-std=c99``, the build line
docs/protocol.md shows. And the port reads its optional arrays with the scalar tag ``AP_F64``, as the
header's usage example reads a required one, which the kit refused for every mask and bias. Both
fail here on the old header. Cheap: one compile (~0.3 s) and a few seconds of calls.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import tomllib

from attention_ports.core import paths
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.runner import run_suite
from tests.conftest import require

KIT = paths.PORTS / "kits" / "c"
NEWUSER = Path(__file__).parents[2] / "data" / "ports" / "c" / "newuser"
OPS = {"softmax", "scaled_dot_product_attention", "multi_head_attention", "layer_norm", "gelu"}


def need_cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        require("cc", "no C compiler on PATH (apt-get install gcc)")
    return cc


def test_the_newuser_c_port_passes_every_case_of_its_operations(tmp_path: Path) -> None:
    need_cc()
    # The committed manifest as it is, built in a temporary folder (the build writes the program
    # beside the manifest): only its relative -I, which points at the kit from the checkout, is made
    # absolute.
    manifest = tomllib.loads((NEWUSER / "port.toml").read_text())
    assert manifest["build"][:2] == ["cc", "-std=c99"], manifest["build"]
    build = [f"-I{KIT}" if a.startswith("-I") else a for a in manifest["build"]]
    shutil.copy(NEWUSER / "port.c", tmp_path / "port.c")
    quoted = ", ".join(f'"{a}"' for a in build)
    (tmp_path / "port.toml").write_text(f'language = "c"\nbuild = [{quoted}]\ncommand = ["./port"]\n')

    results = run_suite(REPO_FIXTURES, ["c"], {"c": tmp_path / "port.toml"}, required={"c"}, progress=None)
    mine = {r.case: r.status for r in results if r.op in OPS}
    assert len(mine) == 79  # every case of the five operations in the shipped fixtures
    assert set(mine.values()) == {"pass"}, {k: v for k, v in mine.items() if v != "pass"}
    assert {r.status for r in results if r.op not in OPS} == {"missing"}


def test_the_c_kit_header_compiles_under_strict_c99_after_another_header(tmp_path: Path) -> None:
    # Another header first: the kit cannot ask for POSIX any more and times calls with clock().
    source = tmp_path / "late.c"
    source.write_text(
        '#include <stdio.h>\n#include "attention_port.h"\nstatic const ap_op OPS[] = {{0, 0}};\n'
        'int main(void) { ap_port p = {"late", OPS, 0, 0}; return ap_serve(&p); }\n'
    )
    cc = need_cc()
    subprocess.run(
        [cc, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", f"-I{KIT}", "-fsyntax-only", str(source)],
        check=True,
    )
