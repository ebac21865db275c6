"""``attention-ports init c FILE.c``: a C port skeleton on the C kit (docs/protocol.md).

Beside ``FILE.c`` (every contract operation as a stub that reads its arguments' names from the
comments and answers "not written yet"), it writes ``FILE.toml`` (the manifest: build with cc,
run the program) and copies the kit's ``attention_port.h``, each only when absent. No operation
is listed in ``OPS`` yet, so ``verify --port c=FILE.toml`` reports every case missing; list each
one as you write it. Arrays are the reference's shapes, row-major, 0-based (the C kit's layout).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from attention_ports.core import paths
from attention_ports.spec import ops
from attention_ports.spec.ops import Role
from attention_ports.tools import skeleton

HEADER = paths.PORTS / "kits" / "c" / "attention_port.h"

_TOP = """\
// {path}: an attention-ports port in C on the C kit (attention_port.h, docs/protocol.md).
//
//   attention-ports verify --port c={manifest}      (builds it, then runs every declared case)
//
// Each operation reads its arguments by name (ap_array, ap_optional_array, ap_option_f64,
// ap_option_i64), allocates its outputs with ap_output and fills them, and returns AP_OK, or
// ap_error(r, "...") for an input it refuses. Arrays are the reference's shapes, row-major:
// x[i * x->dims[1] + j] is x[i, j]; indices (class labels, token ids) count from 0.
// A port written in float64 gets AP_F64_ARRAY arrays (double *). Where a note below speaks of R's
// layout, it is yours (the reference's), but count from 0.
#define _POSIX_C_SOURCE 200809L
#include "attention_port.h"
"""

_BOTTOM = """\
// List each operation here as you write it: verify calls only those (the others are `missing`).
static const ap_op OPS[] = {{
{entries}
    {{0, 0}},
}};

int main(void) {{
    ap_port port = {{"my C port 0.1", OPS, "float64", "zeros"}};
    return ap_serve(&port);
}}
"""

_MANIFEST = """\
# {name}'s manifest: `attention-ports verify --port c={name}.toml` builds it, then runs it.
language = "c"
build = ["cc", "-std=c99", "-O2", "-Wall", "-o", "{name}", "{name}.c", "-lm"]
command = ["./{name}"]
"""


def shape(op: str, name: str) -> str:
    role = ops.get(op).role(name)
    text = skeleton.shape(op, name, "r").split(";")[0]  # R's shapes are the reference's
    if role is Role.INDEX:
        return f"{text}; 0-based index (a class or token id)"
    if role is Role.SCORES and name.endswith("mask"):
        return f"{text}, additive (0 keeps, -Inf removes), or absent"
    return text


def render(path_hint: str, manifest: str) -> str:
    blocks = [_TOP.format(path=path_hint, manifest=manifest)]
    for spec in ops.OPS.values():
        lines = skeleton.kit_comment(
            spec,
            "//",
            shape,
            group=lambda group, members: [
                f"//   {group}: a group (AP_GROUP) of {', '.join(members)}, each shaped like its parameter",
                f'//     (a member: ap_group_array(c, r, "{group}", "{members[0]}", AP_F64_ARRAY, -1), ...)',
            ],
            outputs=f"{', '.join(spec.outputs)} (ap_output, by these names)",
        )
        lines += [
            f"int {spec.name}(ap_call *c, ap_reply *r) {{",
            "    (void)c;",
            f'    return ap_error(r, "{spec.name} is not written yet");',
            "}",
        ]
        blocks.append("\n".join(lines) + "\n")
    entries = "\n".join(f'    // {{"{name}", {name}}},' for name in ops.OPS)
    blocks.append(_BOTTOM.format(entries=entries))
    return "\n".join(blocks)


def main(path: Path) -> int:
    if path.suffix != ".c":
        print(f"attention-ports init: {path}: a C port file must end in .c", file=sys.stderr)
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
    skeleton.atomic_create(manifest, _MANIFEST.format(name=path.stem))
    header = path.parent / HEADER.name
    if not header.exists():
        shutil.copyfile(HEADER, header)
    print(f"wrote {path}, {manifest} and {header.name}: every contract operation as a stub, none listed in OPS yet")
    print(f"next: fill one in, list it in OPS, run: attention-ports verify --port c={manifest}")
    return 0
