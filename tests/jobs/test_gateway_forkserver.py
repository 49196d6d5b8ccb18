"""The warm fork server the suite's gateways start from (jobs/gateway_forkserver.py):
each child is a real separate process that behaves as ``python -m`` would."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys

import pytest

from jobs import gateway_forkserver
from log_layout import open_log
from jobs.gateway_forkserver import ForkedProcess
from jobs.gateway_process import ROOT, GatewayProcess, wait_for


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(gateway_forkserver.ENV, "1")
    path = gateway_forkserver.server_socket(ROOT)
    assert path is not None, "the fork server did not start"
    return path


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_forked_gateway_serves_and_dies_alone_by_sigkill(server, tmp_path):
    open_log(str(tmp_path / "store")).create_topic("t", {"partitions": 1})
    with GatewayProcess(str(tmp_path / "store")) as gw:
        assert isinstance(gw.proc, ForkedProcess)
        assert _parent(gw.proc.pid) not in (os.getpid(), 0)  # the server's child, not ours
        status, body, _ = gw.request("POST", "/topics/t", body={"records": [{"value": {"a": 1}}]},
                                     content_type="application/vnd.kafka.json.v2+json")
        assert status == 200, body
        assert gw.proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            gw.proc.wait(0.1)
        os.kill(gw.proc.pid, signal.SIGKILL)
        assert gw.proc.wait(10) == -signal.SIGKILL
    with GatewayProcess(str(tmp_path / "store")) as again:  # the next one still forks
        status, body, _ = again.request("GET", "/topics/t/partitions/0/offsets")
        assert status == 200 and body["end_offset"] == 1, body


def test_the_child_takes_the_callers_environment_folder_and_output(server, tmp_path):
    out = tmp_path / "out.log"
    env = {**os.environ, "PYTHONPATH": ROOT, "SPARKLOG_GATEWAY_LINGER_MS": "soon"}
    proc = ForkedProcess(server, "jobs.cli", ["--store", str(tmp_path / "s"), "gateway"],
                         env=env, cwd=str(tmp_path), out=str(out))
    assert proc.wait(60) == 2  # the CLI's exit code for a bad setting
    text = out.read_text()
    assert "gateway.linger.ms" in text and "'soon'" in text, text
    assert proc.poll() == 2 and proc.returncode == 2
    # a relative store is the caller's folder's
    proc = ForkedProcess(server, "jobs.cli", ["--store", "relative", "topics", "create", "t"],
                         env=dict(os.environ), cwd=str(tmp_path), out=str(out))
    assert proc.wait(60) == 0, out.read_text()
    assert open_log(str(tmp_path / "relative")).topics() == ["t"]


def test_a_module_that_raises_exits_1_with_its_traceback(server, tmp_path):
    out = tmp_path / "out.log"
    proc = ForkedProcess(server, "jobs.no_such_module", [], env=dict(os.environ), cwd=ROOT,
                         out=str(out))
    assert proc.wait(60) == 1
    assert "No module named jobs.no_such_module" in out.read_text()


def test_without_the_variable_a_gateway_is_a_new_interpreter(monkeypatch, tmp_path):
    monkeypatch.delenv(gateway_forkserver.ENV, raising=False)
    with GatewayProcess(str(tmp_path / "store")) as gw:
        assert isinstance(gw.proc, subprocess.Popen)
        assert _parent(gw.proc.pid) == os.getpid()


def test_the_server_exits_when_its_starter_closes_its_stdin(tmp_path):
    path = str(tmp_path / "socket")
    proc = subprocess.Popen([sys.executable, "-m", "jobs.gateway_forkserver", path], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        child = ForkedProcess(path, "jobs.cli", ["--help"], env=dict(os.environ), cwd=ROOT,
                              out=None)
        assert child.wait(60) == 0
        proc.stdin.close()
        assert proc.wait(30) == 0
        wait_for(lambda: not os.path.exists(path), timeout=5, what="the socket removed")
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    with pytest.raises(OSError):
        ForkedProcess(path, "jobs.cli", ["--help"], env=dict(os.environ), cwd=ROOT, out=None)


def test_a_caller_holding_over_1024_descriptors_still_starts_and_waits(server, tmp_path):
    """A test process can hold more descriptors than select() takes (a CI run failed every
    later gateway of a worker with 'filedescriptor out of range in select()')."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        open_log(str(tmp_path / "store")).create_topic("t", {"partitions": 1})
        with GatewayProcess(str(tmp_path / "store")) as gw:
            assert isinstance(gw.proc, ForkedProcess)
            sock = gw.proc._sock
            if sock.fileno() <= 1024:
                # another thread of this worker closed a low descriptor after the 1,100
                # were taken (a clean-clone run saw fd 18): move the socket above 1,024,
                # so the waits below still poll a descriptor select() would refuse
                gw.proc._sock = socket.socket(fileno=fcntl.fcntl(sock.fileno(),
                                                                 fcntl.F_DUPFD, 1025))
                sock.close()
            assert gw.proc._sock.fileno() > 1024
            assert gw.proc.poll() is None
            with pytest.raises(subprocess.TimeoutExpired):
                gw.proc.wait(0.1)
            os.kill(gw.proc.pid, signal.SIGKILL)
            assert gw.proc.wait(10) == -signal.SIGKILL
    finally:
        for fd in held:
            os.close(fd)
