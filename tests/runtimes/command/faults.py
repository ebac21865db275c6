"""A Python-kit port that misbehaves once: faults.c's port (its header says how) with the Python kit."""

import ctypes
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ports" / "kits" / "python"))
from attention_port import serve

REPLY_FD = int(os.environ.get("ATTENTION_PORTS_WORKER_FDS", "0,1").split(",")[1])


def write(data: bytes) -> None:
    os.write(REPLY_FD, data)


def header(ident: int, length: int) -> bytes:
    return b"APr1" + struct.pack("<QQ", ident, length)


def sleep_in_a_session_of_its_own(arg: str, double_fork: bool) -> None:
    pid = os.fork()
    if pid == 0:
        if double_fork and os.fork() != 0:
            os._exit(0)  # the middle process leaves at once
        os.setsid()
        try:
            os.execvp("sleep", ["sleep", arg])
        finally:
            os._exit(127)
    if double_fork:
        os.waitpid(pid, 0)


def escape(marker: str) -> None:
    """Both sleeps, returning once both have exec'd (they hold a close-on-exec pipe until then)."""
    ready, held = os.pipe()  # Python's descriptors are close-on-exec
    sleep_in_a_session_of_its_own(marker + "1", False)
    sleep_in_a_session_of_its_own(marker + "2", True)
    os.close(held)
    while os.read(ready, 1):
        pass
    os.close(ready)


def misbehave_once() -> None:
    fault, flag = os.environ.get("AP_FAULT"), os.environ.get("AP_FAULT_FLAG")
    if not fault or not flag:
        return
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return  # done before
    print(f"misbehaving: {fault}", flush=True)
    if fault == "hang":
        while True:
            time.sleep(3600)
    elif fault == "crash":
        ctypes.string_at(0)  # SIGSEGV
    elif fault == "abort":
        os.abort()
    elif fault == "garbage":
        write(b"this is not a frame!")
    elif fault == "truncated":
        write(header(1, 100) + b"x" * 10)
    elif fault == "wrong_id":
        write(header(999, 1) + b"M")
    elif fault == "absurd_length":
        write(header(1, 1 << 62))
    elif fault == "flood":
        line = "#" * 1022 + "\n"
        for _ in range(16 * 1024):
            sys.stdout.write(line)
        sys.stdout.flush()
    elif fault == "endless_flood":
        block = b"#" * 65536
        for _ in range(4):
            if os.fork() == 0:
                while True:
                    os.write(1, block)
    elif fault == "escapes":
        escape(os.environ.get("AP_FAULT_MARKER", "987.654"))
    elif fault == "exit_mid_reply":
        write(header(1, 100) + b"T" + b"x" * 29)
        os._exit(0)


def softmax(x):
    misbehave_once()
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return {"y": e / e.sum(axis=-1, keepdims=True)}


if __name__ == "__main__":
    serve({"softmax": softmax}, description="a Python port that misbehaves once")
