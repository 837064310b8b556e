"""A process that has imported torch, Lightning and Hydra once, and forks a child for every run of an entry script.

Why: each `python train.py ...` of the suite spends most of its time starting Python and importing torch and
Lightning (several seconds on a 2-core CI machine), and the suite runs the entry scripts a hundred times. A forked
child is still a process of its own: its own arguments, start directory, environment, standard streams, exit status,
signal handlers and interpreter shutdown (atexit, flushed logs); what it shares with the others is the interpreter
start and the third-party modules already imported. zoo itself is imported fresh in every child.

What differs from a fresh interpreter, and why it does not matter to the tests that use it: variables read when a
preloaded library is imported (OMP_NUM_THREADS, read by OpenMP at load) keep the session's values; tests that need
another value, or that signal or watch a process (preemption, SIGTERM, DDP), start real subprocesses. A traceback
starts with the frames of this file before the script's own.

Protocol, over a Unix socket, one JSON request per connection: {"argv": [script, *args] or ["-m", module, *args],
"cwd", "env", "stdout", "stderr", "status"} -> {"pid"}; when the child ends, its exit code (negative: the signal that
ended it, as subprocess reports it) is written to the "status" file. {"stop": true} ends the server.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import socket
import sys
import tempfile

# What every entry script imports first; zoo is left out on purpose (see the module docstring).
PRELOAD = ("numpy", "torch", "lightning.pytorch", "torchmetrics", "hydra", "omegaconf", "tokenizers")


def _receive(conn: socket.socket) -> dict:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return json.loads(b"".join(chunks))


def _run_child(request: dict) -> None:
    """Become the script's process; never returns (SystemExit runs the interpreter's normal shutdown)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # re-read TMPDIR and friends from this child's environment
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    script = request["argv"][0]
    importlib.invalidate_caches()
    try:
        if script == "-m":  # `python -m module args...`: the start directory first on the path, as Python puts it
            sys.argv = list(request["argv"][1:])
            sys.path[0] = os.getcwd()
            runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(request["argv"])
            sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script.py` sets it
            runpy.run_path(script, run_name="__main__")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    raise SystemExit(0)


def _write_status(path: str, code: int) -> None:
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        f.write(str(code))
    os.replace(partial, path)


def serve(socket_path: str) -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen()
    print("ready", flush=True)
    running: dict[int, str] = {}  # pid -> its status file
    # One thread only: forking a process that runs other threads could hand the child a lock held forever.
    while True:
        readable, _, _ = select.select([listener], [], [], 0.02)
        for pid, status in list(running.items()):
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                _write_status(status, os.waitstatus_to_exitcode(wait_status))
                del running[pid]
        if not readable:
            continue
        conn, _ = listener.accept()
        with conn:
            request = _receive(conn)
            if request.get("stop"):
                return
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                _run_child(request)
            running[pid] = request["status"]
            conn.sendall(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    serve(sys.argv[1])
