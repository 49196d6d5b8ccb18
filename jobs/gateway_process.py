"""A real gateway in a child process (``python -m jobs.cli gateway``) on a free loopback port.

For tests and benchmarks (here, and for applications that test against a real
gateway, as one would with a Kafka testcontainer): a child process is the only
way to SIGKILL a gateway, and it keeps the gateway's event loop off the
caller's GIL. ``with GatewayProcess("file:///tmp/log") as gw: gw.url``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import urllib3

#: the project folder (the child imports the same checkout as its parent)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: ports :func:`free_port` handed out on this machine, by any process, with when each may
#: be handed out again (``port:unix time`` words): a test run's parallel workers, the
#: gateways and clusters they start, and a second run beside the first each take a port
#: the kernel calls free, but nothing listens on it until the caller's server binds it,
#: seconds later (a Spark application: minutes); until then no other caller gets it.
RESERVED_PORTS = os.path.join(tempfile.gettempdir(), "sparklog-free-ports")
RESERVE_S = 600


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now and that no caller on this machine was given in
    the last :data:`RESERVE_S` seconds (the caller binds it later: another program may
    still take it first, as with any port the kernel calls free)."""
    try:
        registry = open(RESERVED_PORTS, "a+")
    except OSError:  # no writable temp folder: the kernel's word alone
        return _unused_port(host)
    with registry:
        fcntl.flock(registry, fcntl.LOCK_EX)  # released when the file closes
        registry.seek(0)
        now = time.time()
        reserved: dict[int, float] = {}
        for word in registry.read().split():
            port, _, until = word.partition(":")
            with contextlib.suppress(ValueError):
                if float(until) > now:
                    reserved[int(port)] = float(until)
        for _ in range(1000):
            port = _unused_port(host)
            if port not in reserved:
                break
        reserved[port] = now + RESERVE_S
        registry.seek(0)
        registry.truncate()
        registry.write(" ".join(f"{p}:{until:.0f}" for p, until in reserved.items()))
        return port


#: how many ports below the kernel's ephemeral range :func:`free_port` picks from
PORTS_BELOW_EPHEMERAL = 10_000


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _unused_port(host: str) -> int:
    """A port nothing listens on, below the kernel's ephemeral range when there is room.

    The kernel hands ephemeral ports to every ``bind(0)`` and outgoing connection on the
    machine (a JVM's py4j gateway, a client's socket): a port picked from that range can
    be taken by one of those between the pick and the caller's bind (a broker app's
    gateway found Spark's py4j server on its port). Below the range only another
    explicit choice can take it, and this module's registry keeps its own apart.
    """
    low = _ephemeral_low()
    if low - PORTS_BELOW_EPHEMERAL >= 1024:
        for _ in range(100):
            # 100 short of the range: a broker app's gateways take base port + slot
            port = random.randrange(low - PORTS_BELOW_EPHEMERAL, low - 100)
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:  # in use: another pick
                    continue
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


#: how long a start may take before it counts as hung: a gateway answers in 1-3 s, but
#: beside a full parallel test run on two cores (load 13-15) starts took over 30 s
START_TIMEOUT_S = 120


class GatewayProcess:
    """``with GatewayProcess(url, options) as gw: gw.url ...``; ``restart()``, ``kill()``.

    ``scheme="https"`` listens on ``https://127.0.0.1:<port>`` (give ``ssl.certfile``
    and friends in ``settings``); ``ca_file`` is the CA its own requests trust, and
    ``cert_file``/``key_file`` the client certificate they present. ``root`` is the
    source tree the child runs (default this one; a benchmark gives another commit's).
    """

    def __init__(self, store_url: str, storage_options: Mapping[str, Any] | None = None, *,
                 settings: Mapping[str, Any] | None = None, port: int | None = None,
                 log_path: str | None = None, scheme: str = "http", ca_file: str | None = None,
                 cert_file: str | None = None, key_file: str | None = None, root: str = ROOT):
        self.root = root
        self.store_url, self.storage_options = store_url, storage_options
        self.settings = {"store.fsync": "false", **(settings or {})}
        self.port = port or free_port()
        self.scheme = scheme
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        tls = {"ca_certs": ca_file, "cert_file": cert_file, "key_file": key_file} \
            if scheme == "https" else {}
        self.http = urllib3.PoolManager(retries=False, timeout=30, **tls)

    def cli_args(self) -> list[str]:
        """The ``sparklog`` arguments that serve this gateway (after ``python -m jobs.cli``)."""
        args = ["--store", self.store_url]
        for k, v in self.settings.items():
            args += ["--set", f"{k}={v}"]
        args += ["gateway", "--port", str(self.port)] if self.scheme == "http" else \
            ["gateway", "--listeners", self.url]
        if self.storage_options:
            args += ["--storage-options", json.dumps(self.storage_options)]
        return args

    def start(self) -> "GatewayProcess":
        self.proc = self.spawn("jobs.cli", self.cli_args(), {**os.environ, "PYTHONPATH": self.root})
        try:
            wait_for(self._healthy, timeout=START_TIMEOUT_S, what=f"gateway on port {self.port}")
        except BaseException:
            self.kill()  # a start that failed leaves no gateway running (and its CPU spent)
            raise
        return self

    def spawn(self, module: str, argv: list[str], env: dict[str, str]):
        """``python -m module *argv`` in ``env``, its output to ``log_path``: forked from
        the warm fork server when the caller asked for one (``jobs.gateway_forkserver``),
        else a new interpreter. Returns the Popen (or its stand-in)."""
        from jobs import gateway_forkserver

        server = gateway_forkserver.server_socket(ROOT) if self.root == ROOT else None
        if server is not None:
            return gateway_forkserver.ForkedProcess(server, module, argv, env=env,
                                                    cwd=self.root, out=self.log_path)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            return subprocess.Popen([sys.executable, "-m", module, *argv], cwd=self.root,
                                    env=env, stdout=out, stderr=subprocess.STDOUT)
        finally:  # the child has its own copy; the parent's was left to the collector,
            # whose ResourceWarning then failed whichever test ran at that moment
            if out is not subprocess.DEVNULL:
                out.close()

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {self.proc.returncode}")
        try:
            # 401: up, and asking for credentials
            return self.http.request("GET", f"{self.url}/healthz", timeout=1).status in (200, 401)
        except urllib3.exceptions.HTTPError:
            return False

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (graceful: flushes everything accepted) and wait."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> "GatewayProcess":
        self.kill()
        return self.start()

    # -- small HTTP helpers ---------------------------------------------------------
    def request(self, method: str, path: str, *, body: Any = None, content_type: str | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, Any, Mapping[str, str]]:
        """(status, parsed JSON or raw bytes, headers)."""
        hdrs = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", content_type or "application/json")
        elif content_type:
            hdrs["Content-Type"] = content_type
        r = self.http.request(method, f"{self.url}{path}", body=body, headers=hdrs)
        data: Any = r.data
        if data and (r.headers.get("content-type") or "").split(";")[0].endswith("json"):
            data = json.loads(data)
        return r.status, data, r.headers

    def __enter__(self) -> "GatewayProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stop()
        finally:
            self.kill()
            self.http.clear()
