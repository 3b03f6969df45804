"""A warm interpreter for the Python processes the tests start.

A stage process spends 8-12 s of CPU importing torch, torchvision (which imports dynamo) and transformers
before it does anything; the suite starts well over a hundred of them. The server here imports those
libraries once and then forks one process per command: the command is a real process, running the real
``python -m …`` code path (``runpy``, as the ``-m`` flag does), with the caller's arguments, environment,
working directory and standard streams, and it exits with its own status, which the caller sees as
its own (a signal included).

The caller runs the client :func:`client_source` writes (an executable file, so it also serves as
``$PYTHON`` for the scripts the tests run). It hands its stdin/stdout/stderr to the server, relays the
signals it gets (TERM, INT, HUP, USR1, USR2) to the forked process and ends as that process ends; if the
caller is killed, the forked process and its process group are killed too.

What a fork inherits that a fresh interpreter would not is kept from mattering:
- A command whose environment differs from the server's in a variable that the preloaded libraries read
  when imported (``PRELOAD_READS``: threads, caches, Hugging Face, Python's own settings) replaces itself
  with a fresh interpreter (``exec``): correct first, fast where it can be.
- Anything but ``[-u] -m module …``, ``[-u] -c code …`` or ``[-u] script.py …`` (a source file) is a fresh
  interpreter too.
- The forked process resets the signal dispositions, gets its own process group, and its own ``__main__``.
Tests that signal a process group, or time a process's start, start ``sys.executable`` as before.
"""

from __future__ import annotations

import array
import atexit
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import struct
import sys
import types

PRELOAD = ("numpy", "PIL.Image", "torch", "torchvision", "transformers", "transformers.image_processing_utils",
           "transformers.modeling_utils", "omegaconf", "hydra")
# Prefixes of environment variables read by Python (PYTHON…, not $PYTHON itself: the scripts' interpreter) or by
# the preloaded libraries when they start.
PRELOAD_READS = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "NUMEXPR", "NUMPY", "TORCH", "PYTORCH",
                 "CUDA", "NVIDIA", "NCCL", "TRITON", "HF_", "HUGGINGFACE", "TRANSFORMERS", "TOKENIZERS",
                 "SAFETENSORS", "ACCELERATE", "USE_", "DISABLE_", "LD_", "MALLOC", "XDG_", "HOME", "LANG",
                 "LC_", "TZ", "HYDRA", "KINETO")
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

CLIENT_SOURCE = r'''#!{python} -S
# A command for the warm interpreter at {socket} (tests/warm_python.py); a fresh one if it is gone.
import array, os, signal, socket, struct, sys, json
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect({socket!r})
except OSError:
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
# Relayed from before the request: the command may run (and its caller signal us) before its pid reaches us.
pid, early = None, []
def relay(number, frame):
    os.kill(pid, number) if pid is not None else early.append(number)
for number in {relayed}:
    signal.signal(number, relay)
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
s.sendmsg([struct.pack("!I", len(request))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
s.sendall(request)
replies = s.makefile("rb")
pid = int(replies.readline())
for number in early:
    os.kill(pid, number)
how, value = replies.readline().split()
if how == b"signal":  # end the same way
    if int(value) not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(int(value), signal.SIG_DFL)
    os.kill(os.getpid(), int(value))
os._exit(int(value) if how == b"exit" else 1)
'''


def client_source(python: str, socket_path: str) -> str:
    return CLIENT_SOURCE.format(python=python, socket=socket_path, relayed=tuple(int(s) for s in RELAYED))


def serve(socket_path: str) -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: ends with the test session that started it
    environment = dict(os.environ)
    for name in PRELOAD:
        importlib.import_module(name)
    # What importing them set (torch's inductor cache dir): a fresh interpreter's imports would set it too.
    added = {key: value for key, value in os.environ.items() if key not in environment}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # each command's monitor is reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print("ready", flush=True)
    while True:
        connection, _ = server.accept()
        if os.fork() == 0:
            server.close()
            _monitor(connection, environment, added)
        connection.close()


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(4, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    (size,) = struct.unpack("!I", data)
    body = b""
    while len(body) < size:
        chunk = connection.recv(size - len(body))
        if not chunk:
            os._exit(1)
        body += chunk
    return json.loads(body), list(fds)


def _monitor(connection: socket.socket, environment: dict, added: dict) -> None:
    """One command: fork it, tell the caller its pid, wait for it, tell the caller how it ended; kill it if the
    caller goes away first."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    request, fds = _receive(connection)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _command(request, fds, environment, added)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    process = os.pidfd_open(pid)
    watched = [connection, process]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if connection in ready and not connection.recv(1):  # the caller is gone: so is its command
            watched.remove(connection)
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if process in ready:
            _, status = os.waitpid(pid, 0)
            ended = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                     else f"exit {os.waitstatus_to_exitcode(status)}")
            try:
                connection.sendall(f"{ended}\n".encode())
            finally:
                os._exit(0)


def _command(request: dict, fds: list[int], environment: dict, added: dict) -> None:
    os.setpgid(0, 0)
    for number, fd in enumerate(fds):
        os.dup2(fd, number)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    argv, env = request["argv"], request["env"]
    for number in (*RELAYED, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    unbuffered = argv[:1] == ["-u"]
    rest = argv[1:] if unbuffered else argv
    changed = {k for k in set(env) | set(environment) if env.get(k) != environment.get(k)
               and not (k in added and env.get(k) in (None, added[k]))}  # what the imports set: set either way
    extra_path = []
    if "PYTHONPATH" not in environment:  # its folders go on sys.path below, where a fresh interpreter puts them
        changed.discard("PYTHONPATH")
        extra_path = [folder for folder in env.get("PYTHONPATH", "").split(os.pathsep) if folder]
    warm = (not any(k.startswith(PRELOAD_READS) and k != "PYTHON" for k in changed) and rest and
            (rest[0] in ("-m", "-c") and len(rest) > 1 or _source_file(rest[0], request["cwd"])))
    if not warm:
        os.execve(sys.executable, [sys.executable, *argv], env)
    os.environ.clear()
    os.environ.update({**added, **env})
    import tempfile

    tempfile.tempdir = None  # gettempdir() caches its first answer: the server's
    if unbuffered:  # as -u: no buffer between a write and the stream
        sys.stdout, sys.stderr = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True, errors=errors)
                                  for fd, errors in ((1, "strict"), (2, "backslashreplace")))
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    code = 0
    sys.path[1:1] = extra_path
    try:
        if rest[0] == "-m":
            sys.argv = ["-m", *rest[2:]]
            sys.path[0] = os.getcwd()
            runpy._run_module_as_main(rest[1], alter_argv=True)
        elif rest[0] == "-c":
            sys.argv = ["-c", *rest[2:]]
            sys.path[0] = ""
            exec(compile(rest[1], "<string>", "exec"), main.__dict__)
        else:
            # As the interpreter runs a script: argv[0] as given, __file__ absolute, its folder first on sys.path.
            sys.argv = list(rest)
            path = os.path.abspath(rest[0])
            sys.path[0] = os.path.dirname(path)
            with open(path, "rb") as source:
                compiled = compile(source.read(), path, "exec")
            main.__dict__.update(__name__="__main__", __file__=path, __package__=None, __spec__=None)
            exec(compiled, main.__dict__)
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            code = end.code or 0
        else:
            print(end.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        _shutdown()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _shutdown()
    os._exit(code)


def _source_file(argument: str, cwd: str) -> bool:
    """A script the warm path runs: a Python source file (not an option, a folder or a zip with __main__)."""
    import zipfile

    path = os.path.join(cwd, argument)
    return not argument.startswith("-") and os.path.isfile(path) and not zipfile.is_zipfile(path)


def _shutdown() -> None:
    """What an interpreter does when its main module ends: wait for its threads, run its exit functions, flush."""
    import threading

    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    serve(sys.argv[1])
