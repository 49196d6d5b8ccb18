"""A warm parent for the gateway processes a test suite starts by the hundred.

``python -m jobs.cli gateway`` spends about a second of CPU importing pyarrow, kio,
the HTTP app and the Kafka listener before it serves; a suite that starts some 300
gateways spends minutes of its two cores on those imports alone. The fork server
imports them once, then forks one child per start. The child is an ordinary separate
process: its own pid, sockets and store handles, killed alone by SIGKILL. It runs the
module as ``python -m`` would, with the caller's arguments, environment, working folder
and output file, and exits as that would (atexit handlers, non-daemon threads joined).

Opt-in: :class:`jobs.gateway_process.GatewayProcess` uses it when
``SPARKLOG_FORK_GATEWAYS=1`` (the test suite sets it); a product process and the
benchmarks start plain ones.

Protocol, one Unix-socket connection per child: the caller sends one JSON line
``{"module", "argv", "env", "cwd", "out"}``; the server answers ``{"pid": N}`` at the
fork and ``{"returncode": rc}`` (negative: killed by that signal) once it has reaped
the child, then closes. The server exits when its stdin (a pipe from its starter)
closes.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

ENV = "SPARKLOG_FORK_GATEWAYS"
#: what a gateway imports before it serves (and pyarrow's lazy pandas import, which the
#: first JSON produce would otherwise pay)
WARM_MODULES = ("jobs.cli", "jobs.commands.gateway", "ingest_gateway.runner",
                "ingest_gateway.http.app", "ingest_gateway.kafka.listener", "uvicorn",
                "uvloop", "pyarrow")
START_TIMEOUT_S = 120


# -- the server --------------------------------------------------------------------------
def _warm() -> None:
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    import pyarrow as pa

    pa.array([0])  # imports pandas (pyarrow checks every list it converts)


def serve(path: str) -> dict[str, Any] | None:
    """Fork a child per request on the socket at ``path`` until stdin closes. Returns
    None in the server; in a forked child it returns that child's request."""
    server_pid = os.getpid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the pipe
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin, wake_r], [], [])
            if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
                return None
            if wake_r in ready:
                os.read(wake_r, 4096)
            if listener in ready:
                conn, _ = listener.accept()
                request = _request(conn)
                if request is not None:
                    pid = os.fork()
                    if pid == 0:
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        for fd in (wake_r, wake_w):
                            os.close(fd)
                        for s in (listener, conn, *children.values()):
                            s.close()
                        return request
                    children[pid] = conn
                    _send(conn, {"pid": pid})
            _reap(children)
    finally:
        if os.getpid() == server_pid:
            listener.close()
            os.unlink(path)


def _request(conn: socket.socket) -> dict[str, Any] | None:
    conn.settimeout(10)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        return json.loads(data)
    except (OSError, ValueError):
        conn.close()
        return None


def _send(conn: socket.socket, doc: dict[str, Any]) -> None:
    try:
        conn.sendall(json.dumps(doc).encode() + b"\n")
    except OSError:  # the caller is gone: nobody to tell
        pass


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
            conn.close()


def _become(request: dict[str, Any]) -> None:
    """In the forked child: take the caller's folder, environment and output, then run
    the module as ``python -m`` does (its SystemExit ends this interpreter)."""
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"] or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(stdin, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(stdin)
    os.close(out)
    sys.argv = [request["module"], *request["argv"]]
    # as under ``python -m``, the module runs as __main__ only, not also as itself
    sys.modules.pop(request["module"], None)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def main() -> None:
    _warm()
    request = serve(sys.argv[1])
    if request is not None:
        _become(request)


# -- the caller's side -------------------------------------------------------------------
class ForkedProcess:
    """A child of the fork server, answering as much of :class:`subprocess.Popen` as the
    gateway's callers use: pid, args, returncode, poll, wait, send_signal, terminate,
    kill. Raises OSError if the server cannot be reached."""

    def __init__(self, socket_path: str, module: str, argv: list[str], *,
                 env: dict[str, str], cwd: str, out: str | None):
        self.args = [sys.executable, "-m", module, *argv]
        self.returncode: int | None = None
        self._buf = b""
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(socket_path)
            self._sock.sendall(json.dumps({"module": module, "argv": argv, "env": env,
                                           "cwd": cwd, "out": out}).encode() + b"\n")
            self.pid = int(self._line(None)["pid"])
        except BaseException:
            self._sock.close()
            raise

    def _line(self, timeout: float | None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._readable(left):
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            chunk = self._sock.recv(4096)
            if not chunk:
                raise OSError("the gateway fork server closed the connection")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def _readable(self, timeout: float | None) -> bool:
        """Whether the socket has data within ``timeout`` s (None: waits). poll(), not
        select(): a test process may hold over 1,024 descriptors, which select() refuses."""
        waiting = select.poll()
        waiting.register(self._sock, select.POLLIN)
        return bool(waiting.poll(None if timeout is None else timeout * 1000))

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; raises subprocess.TimeoutExpired after ``timeout`` s."""
        if self.returncode is None:
            self.returncode = int(self._line(timeout)["returncode"])
            self._sock.close()
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        self._sock.close()


_server: tuple[subprocess.Popen, str] | None = None
_server_lock = threading.Lock()


def server_socket(root: str) -> str | None:
    """This process's fork server's socket (started at the first call), or None when
    ``SPARKLOG_FORK_GATEWAYS`` is not ``1`` or the server would not start."""
    global _server
    if os.environ.get(ENV) != "1":
        return None
    with _server_lock:
        if _server is not None and _server[0].poll() is None:
            return _server[1]
        path = os.path.join(tempfile.mkdtemp(prefix="sparklog-fork-"), "socket")
        env = {**os.environ, "PYTHONPATH": root}
        env.pop(ENV)
        proc = subprocess.Popen([sys.executable, "-m", "jobs.gateway_forkserver", path],
                                cwd=root, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None
        waiting = selectors.DefaultSelector()  # select() refuses descriptors over 1,024
        waiting.register(proc.stdout, selectors.EVENT_READ)
        ready = waiting.select(START_TIMEOUT_S)
        waiting.close()
        if ready and proc.stdout.readline() == b"ready\n":
            _server = (proc, path)
            atexit.register(_stop, proc)
            return path
        proc.kill()
        proc.wait()
        return None


def _stop(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()  # the server's stdin closes: it exits
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
