"""A preloaded interpreter that forks ``platformctl`` commands: each command a process of its own, without paying for
Python's start and the toolkit's imports (about 1.5 s of CPU a command, most of it the Kubernetes client, boto3,
networkx and the pydantic models) every time a process test runs one.

The zygote is started once per test session from a clean interpreter (no pytest in it, one thread) and imports what
the commands import. For each command it forks a *waiter*, which forks the command: the command sets its own
environment, working directory, arguments and standard streams (files the caller names), runs
``platformctl.cli.main`` and exits with its code, as ``python -m platformctl`` would; the waiter sends the caller the
command's pid, then its wait status. A command killed by SIGKILL (a failpoint) is reported as ``-9``, as
``subprocess`` reports it. Commands that start commands (``local up`` and its server) start them with
``sys.executable`` as ever.

``PLATFORMCTL_TEST_NO_ZYGOTE=1`` runs every command with ``python -m platformctl`` instead.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

PRELOAD = ("platformctl.cli", "platformctl.app.rotation", "platformctl.app.release", "platformctl.app.canaries",
           "platformctl.kernel.cluster.live", "kubernetes.client", "kubernetes.config", "boto3", "botocore.session",
           "networkx", "yaml", "e2e_canary.runner")


def serve(path: str) -> None:
    """The zygote's loop (run as ``python -m tests.zygote SOCKET``)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import boto3

    boto3.session.Session()._session.get_component("data_loader")  # botocore's loader, built once
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters reap themselves
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _wait_for_command(conn)
        conn.close()


def _wait_for_command(conn: socket.socket) -> None:
    try:
        request = json.loads(conn.makefile("r").readline())
        pid = os.fork()
        if pid == 0:
            conn.close()
            _command(request)
        conn.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)


def _command(request: dict[str, Any]) -> None:
    """In the forked command: what ``python -m platformctl ARGS`` would start with, then the command, then its exit."""
    code = 1
    try:
        for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                               (2, request["stderr"], os.O_WRONLY)):
            opened = os.open(path, mode)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["platformctl", *request["args"]]
        from platformctl.cli import main

        try:
            main()
            code = 0
        except SystemExit as exc:  # as the interpreter ends: an int is the code, anything else is printed, code 1
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class Zygote:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="platformctl-zygote-")
        self.path = os.path.join(self.folder, "socket")
        self.process = subprocess.Popen([sys.executable, "-m", "tests.zygote", self.path], stdout=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, text=True, cwd=str(Path(__file__).resolve().parent.parent))
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the zygote did not start")

    def run(self, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
        """``subprocess.run([python, -m, platformctl, *args], capture_output=True, text=True, env=env,
        timeout=timeout)``, forked from the zygote."""
        command = [sys.executable, "-m", "platformctl", *args]
        streams = [tempfile.NamedTemporaryFile("w+", dir=self.folder, delete=False) for _ in range(2)]
        timed_out = threading.Event()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(self.path)
                answers = conn.makefile("r")
                conn.sendall((json.dumps({"args": args, "env": env, "cwd": os.getcwd(), "stdout": streams[0].name,
                                          "stderr": streams[1].name}) + "\n").encode())
                pid = int(answers.readline())

                def kill() -> None:
                    timed_out.set()
                    os.kill(pid, signal.SIGKILL)

                timer = threading.Timer(timeout, kill)
                timer.start()
                try:
                    status = answers.readline()
                finally:
                    timer.cancel()
                answers.close()
            stdout, stderr = (Path(s.name).read_text() for s in streams)
            if not status:
                raise RuntimeError(f"the zygote lost {command}")
            if timed_out.is_set():
                raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
            return subprocess.CompletedProcess(command, int(status), stdout, stderr)
        finally:
            for s in streams:
                s.close()
                os.unlink(s.name)

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        try:
            os.unlink(self.path)
            os.rmdir(self.folder)
        except OSError:
            pass


_zygote: Zygote | None = None
_lock = threading.Lock()


def zygote() -> Zygote | None:
    global _zygote
    if os.environ.get("PLATFORMCTL_TEST_NO_ZYGOTE"):
        return None
    with _lock:
        if _zygote is None:
            _zygote = Zygote()
            atexit.register(close)
        return _zygote


def close() -> None:
    global _zygote
    with _lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


if __name__ == "__main__":
    serve(sys.argv[1])
