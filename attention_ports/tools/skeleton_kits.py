"""``attention-ports init rust|javascript|python FILE``: a port skeleton on the Rust, JavaScript or
Python kit (docs/protocol.md), as ``init c`` writes one on the C kit (skeleton_c.py).

Beside ``FILE`` (every contract operation as a stub that reads its arguments' names from the
comments and answers "not written yet") it copies the kit (``attention_port.rs``, ``.js``, ``.py``)
and, for Rust and JavaScript, writes ``FILE.toml`` (the manifest: build with rustc / run with node);
a Python port is its own ``.py`` file (``verify --port py=FILE.py`` starts it with this Python).
Each is written only when absent. No operation is listed yet, so ``verify`` reports every case
missing; list each one as you write it. The three kits are row-major and 0-based, as the C kit is,
so the notes are the C skeleton's (:func:`attention_ports.tools.skeleton_c.shape`).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from attention_ports.core import paths
from attention_ports.spec import ops
from attention_ports.spec.ops import OpSpec
from attention_ports.tools import skeleton, skeleton_c

KITS = paths.PORTS / "kits"


@dataclass(frozen=True)
class Kit:
    name: str  # the language, as `init` and the manifests name it
    suffix: str
    kit: Path  # the kit's one file, copied beside the port
    port_name: str  # NAME in the suggested `verify --port NAME=...`
    comment: str
    manifest: str | None  # None: the port file is its own command (Python)


KIT = {
    "rust": Kit(
        "rust",
        ".rs",
        KITS / "rust" / "attention_port.rs",
        "rs",
        "//",
        "# {name}'s manifest: `attention-ports verify --port rs={name}.toml` builds it with rustc, then runs it.\n"
        'language = "rust"\n'
        'build = ["rustc", "-O", "--edition", "2021", "-o", {program}, {file}]\n'
        "command = [{command}]\n",
    ),
    "javascript": Kit(
        "javascript",
        ".js",
        KITS / "node" / "attention_port.js",
        "js",
        "//",
        "# {name}'s manifest: `attention-ports verify --port js={name}.toml` runs it with node.\n"
        'language = "javascript"\n'
        'command = ["node", {file}]\n',
    ),
    "python": Kit("python", ".py", KITS / "python" / "attention_port.py", "py", "#", None),
}
LANGUAGES = tuple(KIT)

_ACCESS = {
    "rust": 'c.f64_array("x")?, c.optional_f64_array("mask")?, c.option_f64("scale"), c.option_i64(...)',
    "javascript": "a.x (or a.mask, undefined when absent): { dtype, shape, data: Float64Array }; options are numbers",
    "python": "NumPy float64 arrays; an optional one absent is None",
}

_TOP = {
    "rust": """\
//! {path}: an attention-ports port in Rust on the Rust kit (attention_port.rs, docs/protocol.md).
//!
//!     attention-ports verify --port rs={manifest}      (builds it with rustc, then runs every declared case)
//!
//! Each operation reads its arguments by name ({access}),
//! returns Ok(vec![("y".into(), array), ...]) with its outputs by these names, or Err("...") for an
//! input it refuses. Arrays are the reference's shapes, row-major: x[i * n + j] is x[i, j] of an
//! (m, n) array; indices (class labels, token ids) count from 0. Where a note below speaks of R's
//! layout, it is yours (the reference's), but count from 0.
#![allow(dead_code, unused_imports)]
#[path = "attention_port.rs"]
mod attention_port;
use attention_port::{{Array, Call, Outputs}};
""",
    "javascript": """\
// {path}: an attention-ports port in JavaScript (Node) on the JavaScript kit (attention_port.js,
// docs/protocol.md).
//
//   attention-ports verify --port js={manifest}
//
// Each operation gets `a`, its arguments by contract name ({access}),
// and returns an object of its outputs by these names (zeros("float64", shape) makes one), or
// throws for an input it refuses. Arrays are the reference's shapes, row-major: data[i * n + j] is
// x[i, j] of an (m, n) array; indices (class labels, token ids) count from 0. Where a note below
// speaks of R's layout, it is yours (the reference's), but count from 0.
"use strict";
const path = require("path");
const {{ serve, zeros }} = require(path.join(__dirname, "attention_port.js"));
""",
    "python": '''\
"""{path}: an attention-ports port in Python on the Python kit (attention_port.py, docs/protocol.md).

    attention-ports verify --port py={manifest}

Compute with NumPy, JAX, CuPy or plain Python. Each operation takes its arguments by the
contract's names ({access}) and
returns a dict of its outputs by these names (anything numpy.asarray takes), or raises for an
input it refuses. Arrays are the reference's shapes, row-major, as NumPy holds them; indices
(class labels, token ids) count from 0. Where a note below speaks of R's layout, it is yours (the
reference's), but count from 0.
"""

import numpy as np

# the kit, attention_port.py beside this file (Python puts a script's folder on sys.path)
from attention_port import serve
''',
}

_BOTTOM = {
    "rust": """\
// List each operation here as you write it: verify calls only those (the others are `missing`).
const OPS: &[(&str, attention_port::Op)] = &[
{entries}
];

fn main() {{
    std::process::exit(attention_port::serve("my Rust port 0.1", OPS, "float64", "zeros"))
}}
""",
    "javascript": """\
// List each operation here as you write it: verify calls only those (the others are `missing`).
const operations = {{
{entries}
}};

serve(operations, {{ description: "my JavaScript port 0.1" }});
""",
    "python": """\
# List each operation here as you write it: verify calls only those (the others are `missing`).
OPERATIONS = {{
{entries}
}}

if __name__ == "__main__":
    serve(OPERATIONS, description=f"my Python port 0.1 (NumPy {{np.__version__}})")
""",
}


def _stub(lang: str, spec: OpSpec) -> list[str]:
    message = f"{spec.name} is not written yet"
    if lang == "rust":
        return [f"fn {spec.name}(_c: &Call) -> Result<Outputs, String> {{", f'    Err("{message}".into())', "}"]
    if lang == "javascript":
        return [f"function {spec.name}(a) {{", f'  throw new Error("{message}");', "}"]
    # Python: the kit passes the positional arguments positionally, the others by name
    params = [*spec.args, *spec.groups, *spec.positional_options]
    params += [f"{k}=None" for k in (*spec.kwargs, *skeleton.port_options(spec))]
    return [f"def {spec.name}({', '.join(params)}):", f"    raise NotImplementedError({json.dumps(message)})"]


def _entry(lang: str, name: str) -> str:
    if lang == "rust":
        return f'    // ("{name}", {name}),'
    if lang == "javascript":
        return f"  // {name},"
    return f'    # "{name}": {name},'


def render(lang: str, path_hint: str, manifest: str) -> str:
    c = KIT[lang].comment
    blocks = [_TOP[lang].format(path=path_hint, manifest=manifest, access=_ACCESS[lang])]
    for spec in ops.OPS.values():
        lines = skeleton.kit_comment(spec, c, skeleton_c.shape)
        blocks.append("\n".join([*lines, *_stub(lang, spec)]) + "\n")
    entries = "\n".join(_entry(lang, name) for name in ops.OPS)
    blocks.append(_BOTTOM[lang].format(entries=entries))
    return ("\n\n" if lang == "python" else "\n").join(blocks)


def main(lang: str, path: Path) -> int:
    kit = KIT[lang]
    if path.suffix != kit.suffix:
        print(f"attention-ports init: {path}: a {lang} port file must end in {kit.suffix}", file=sys.stderr)
        return 2
    if path.stem == kit.kit.stem:  # the port would shadow (or be) the kit it loads
        print(f"attention-ports init: {path}: name the port other than {path.stem!r}", file=sys.stderr)
        return 2
    manifest = path.with_suffix(".toml") if kit.manifest is not None else None
    if manifest is not None and manifest.exists():
        print(f"attention-ports init: {manifest} already exists; not overwriting it", file=sys.stderr)
        return 2
    target = manifest if manifest is not None else path
    try:
        skeleton.atomic_create(path, render(lang, str(path), target.name))
    except skeleton.InitError as exc:
        print(f"attention-ports init: {exc}", file=sys.stderr)
        return 2
    wrote = [str(path)]
    if manifest is not None and kit.manifest is not None:
        skeleton.atomic_create(
            manifest,
            kit.manifest.format(
                name=path.stem,
                file=json.dumps(path.name),
                program=json.dumps(path.stem),
                command=json.dumps(f"./{path.stem}"),
            ),
        )
        wrote.append(str(manifest))
    copy = path.parent / kit.kit.name
    if not copy.exists():
        shutil.copyfile(kit.kit, copy)
    wrote.append(copy.name)
    print(f"wrote {', '.join(wrote[:-1])} and {wrote[-1]}: every contract operation as a stub, none listed yet")
    print(f"next: fill one in, list it, run: attention-ports verify --port {kit.port_name}={target}")
    return 0
