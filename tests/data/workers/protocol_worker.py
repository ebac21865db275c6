"""A worker written in Python that speaks attention_ports.protocol, to test the supervisor alone.

Not a stand-in for R or Julia (their workers are tested for real): it exercises the life cycle
with behaviour chosen per operation, and measures the protocol's own cost. Operations:

- ``echo``: returns every array argument as a result of the same name;
- ``sleep...`` (any name starting so): sleeps ``seconds`` (a keyword argument), returns nothing;
- ``print``: writes ``bytes`` bytes of text to stdout (the last line "the end"), then returns;
- ``exit``: exits with ``code``;
- anything else: 'M' (missing).

With ``--greet-late SECONDS`` it waits before greeting; with ``--no-greet`` it exits at once.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from attention_ports.runtimes import protocol
from attention_ports.runtimes.supervisor import die_with_parent, worker_fds


def read_exact(fd: int, n: int) -> bytearray | None:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if not k:
            return None
        got += k
    return buf


def send(fd: int, ident: int, body) -> None:
    for part in protocol.frame(protocol.REPLY_MAGIC, ident, body):
        view = memoryview(part).cast("B")
        while view:
            view = view[os.write(fd, view) :]


def main(argv: list[str]) -> None:
    die_with_parent()
    request_fd, reply_fd = worker_fds()
    if "--no-greet" in argv:
        sys.exit(5)
    if "--greet-late" in argv:
        time.sleep(float(argv[argv.index("--greet-late") + 1]))
    send(reply_fd, 0, protocol.reply_hello("protocol test worker", "", None))
    while True:
        header = read_exact(request_fd, protocol.HEADER.size)
        if header is None:
            return
        _, ident, length = protocol.HEADER.unpack(header)
        body = read_exact(request_fd, length) if length else bytearray()
        request = protocol.decode_request(np.frombuffer(body, np.uint8))
        kw = {a.name: a.value for a in request.args}
        if request.op == "":
            return
        if request.op == "echo":
            reply = protocol.reply_results(
                "", [(a.name, a.value) for a in request.args if isinstance(a.value, np.ndarray)]
            )
        elif request.op.startswith("sleep"):
            time.sleep(kw["seconds"])
            reply = protocol.reply_results("", [])
        elif request.op == "print":
            sys.stdout.write("x" * (kw["bytes"] - 8) + "\nthe end")
            sys.stdout.flush()
            reply = protocol.reply_results("", [])
        elif request.op == "exit":
            os._exit(kw["code"])
        else:
            reply = protocol.reply_missing(f"{request.op} is not defined here")
        send(reply_fd, ident, reply)


if __name__ == "__main__":
    main(sys.argv[1:])
