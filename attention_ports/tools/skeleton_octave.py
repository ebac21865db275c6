"""``attention-ports init octave FILE.m``: an Octave port skeleton on the Octave kit (docs/protocol.md).

Beside ``FILE.m`` (a script: every contract operation as a function stub that reads its arguments'
names from the comments and raises "not written yet", then the call that serves them) it writes
``FILE.toml`` (the manifest: run the script with octave-cli) and copies the kit's
``attention_port.m``, each only when absent. No operation is listed in ``ops`` yet, so
``verify --port oct=FILE.toml`` reports every case missing; list each one as you write it.

Octave's layout is R's (column-major, 1-based, the reference's shapes), so the shapes and notes are
R's (:func:`attention_ports.tools.skeleton.shape`), with Octave's ``*`` for R's ``%*%``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from attention_ports.core import paths
from attention_ports.spec import ops
from attention_ports.spec.ops import Role
from attention_ports.tools import skeleton

KIT = paths.PORTS / "kits" / "octave" / "attention_port.m"

_TOP = """\
## {path}: an attention-ports port in GNU Octave on the Octave kit (attention_port.m, docs/protocol.md).
##
##   attention-ports verify --port oct={manifest}
##
## Each operation gets `a`, its arguments by contract name (an optional one absent: isfield (a, "mask")
## is false), and may take a second argument, `dims`: each argument's shape on the wire. It returns a
## struct of its outputs by these names (a group's members as out.grads.w_q), or error ("...") for an
## input it refuses. Arrays are the reference's shapes, column-major, as Octave holds them: x(i, j)
## is x[i, j]; indices (class labels, token ids: int64 arrays) count from 1; where a note below
## speaks of R's layout, it is yours. Octave holds no 0-D or 1-D array and
## drops a trailing dim of 1, so an output marked "give its dims" is returned as {{array, dims}}:
## out.loss = {{loss, []}}, out.weights = {{w, [h, n_q, n_k]}}.
1;  # a script: the functions below, then the call at the end that serves them
"""

_BOTTOM = """\
## List each operation here as you write it: verify calls only those (the others are `missing`).
ops = struct ();
{entries}

addpath (fileparts (mfilename ("fullpath")));  # attention_port.m, beside this file
attention_port (ops, struct ("description", "my Octave port 0.1"));
"""

_MANIFEST = """\
# {name}'s manifest: `attention-ports verify --port oct={name}.toml` runs it.
language = "octave"
command = ["octave-cli", "--norc", "--quiet", "--no-history", "--no-window-system", {script}]
"""


def _shape(op: str, name: str) -> str:
    text = skeleton.shape(op, name, "r").replace("%*%", "*")  # R's layout is Octave's
    if ops.get(op).role(name) is Role.SCORES and name.endswith("mask"):
        return f"{text}, additive (0 keeps, -Inf removes)"
    return text


def _output(op: str, name: str) -> str:
    dims = skeleton.SHAPES[op][name.rsplit(".", 1)[-1]]
    what = " x ".join(dims) if len(dims) > 1 else f"vector, length {dims[0]}" if dims else "a number"
    return f"{name} ({what}{'' if len(dims) == 2 else '; give its dims'})"


def render(path_hint: str, manifest: str) -> str:
    blocks = [_TOP.format(path=path_hint, manifest=manifest)]
    for spec in ops.OPS.values():
        lines = skeleton.kit_comment(
            spec,
            "##",
            _shape,
            prefix="a.",
            group=lambda group, members: [
                f"##   a.{group}: a struct of {', '.join(members)}, each shaped like its parameter"
            ],
            outputs=", ".join(_output(spec.name, o) for o in spec.outputs),
        )
        lines += [
            f"function out = {spec.name} (a, dims)",
            f'  error ("{spec.name} is not written yet");',
            "endfunction",
        ]
        blocks.append("\n".join(lines) + "\n")
    entries = "\n".join(f"# ops.{name} = @{name};" for name in ops.OPS)
    blocks.append(_BOTTOM.format(entries=entries))
    return "\n".join(blocks)


def main(path: Path) -> int:
    if path.suffix != ".m":
        print(f"attention-ports init: {path}: an Octave port file must end in .m", file=sys.stderr)
        return 2
    if path.stem in ops.OPS or path.stem == KIT.stem:  # a script named like a function it defines
        print(f"attention-ports init: {path}: name the script other than {path.stem!r}", file=sys.stderr)
        return 2
    manifest = path.with_suffix(".toml")
    if manifest.exists():
        print(f"attention-ports init: {manifest} already exists; not overwriting it", file=sys.stderr)
        return 2
    try:
        skeleton.atomic_create(path, render(str(path), manifest.name))
    except skeleton.InitError as exc:
        print(f"attention-ports init: {exc}", file=sys.stderr)
        return 2
    skeleton.atomic_create(manifest, _MANIFEST.format(name=path.stem, script=json.dumps(path.name)))
    kit = path.parent / KIT.name
    if not kit.exists():
        shutil.copyfile(KIT, kit)
    print(f"wrote {path}, {manifest} and {kit.name}: every contract operation as a stub, none listed in ops yet")
    print(f"next: fill one in, list it in ops, run: attention-ports verify --port oct={manifest}")
    return 0
