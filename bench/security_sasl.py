"""What a SASL login costs on the Kafka listener: PLAIN beside SCRAM-SHA-256 and -512.

One gateway subprocess with a SASL_PLAINTEXT listener offering PLAIN (the argon2id
password file) and SCRAM (credentials in the store, 4096 iterations: Kafka's default).
Each mechanism logs in ``--logins`` times, each on a new connection (SaslHandshake v1,
then SaslAuthenticate once for PLAIN, twice for SCRAM), the mechanisms alternating
round by round. Per mechanism: logins per second (wall, the client's work included:
for SCRAM its PBKDF2 of the password, 4096 HMACs, which Kafka's client pays too) and
the gateway's CPU time per login (``/proc/<pid>/stat``: what the server pays; PLAIN's
first login runs argon2id, ~50 ms, later ones of the same password are remembered).

Usage: ``python bench/security_sasl.py [--quick] [--logins N] [--repeat R]``; also run
by ``bench/security.py`` (its ``sasl_login_*`` figures). Writes
``bench/results/security_sasl.json``.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import struct
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import scramp  # noqa: E402

from bench.common import machine, write_results  # noqa: E402
from ingest_gateway.security import passwords  # noqa: E402
from ingest_gateway.security.scram import credential  # noqa: E402
from jobs.gateway_process import GatewayProcess, free_port  # noqa: E402
from log_layout import open_log, scram  # noqa: E402

USER, PASSWORD = "bench", "bench-password"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _call(s: socket.socket, request, version: int):
    """Send one kio request (header v1, or v2 when flexible); its kio answer."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader, entity_writer

    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    head = struct.pack(">hhih", type(request).__api_key__, version, 1, 5) + b"bench"
    payload = head + (b"\0" if type(request).__flexible__ else b"") + body.getvalue()
    s.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", _exactly(s, 4))[0]
    data = _exactly(s, size)
    cls = load_response_schema(type(request).__api_key__, version)
    return entity_reader(cls)(data, 4 + (1 if cls.__flexible__ else 0))[0]


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the gateway closed the connection")
        buf += chunk
    return buf


def login(port: int, mechanism: str) -> None:
    """One login on a new connection; raises AssertionError if refused."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        assert int(_call(s, SaslHandshakeRequest(mechanism=mechanism), 1).error_code) == 0
        if mechanism == "PLAIN":
            answer = _call(s, SaslAuthenticateRequest(
                auth_bytes=f"\0{USER}\0{PASSWORD}".encode()), 2)
            assert int(answer.error_code) == 0, answer
            return
        client = scramp.ScramClient([mechanism], USER, PASSWORD)
        first = _call(s, SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()), 2)
        assert int(first.error_code) == 0, first
        client.set_server_first(first.auth_bytes.decode())
        final = _call(s, SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()), 2)
        assert int(final.error_code) == 0, final
        client.set_server_final(final.auth_bytes.decode())


def measure(root: str, logins: int, repeat: int) -> list[dict]:
    """The figures (module doc) of a gateway made under ``root``."""
    store = os.path.join(root, "store")
    log = open_log(store)
    scram.alter(log.store, upsert={(USER, m): credential(m, PASSWORD) for m in MECHANISMS[1:]})
    pw_file = os.path.join(root, "passwords")
    passwords.add(pw_file, USER, PASSWORD)
    port = free_port()
    gw = GatewayProcess(store, settings={
        "authentication.method": "basic,scram", "authentication.password.file": pw_file,
        "gateway.kafka.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"}).start()
    rates: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    cpu: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    try:
        for m in MECHANISMS:
            login(port, m)  # warm: PLAIN's argon2 check, SCRAM's first read of the store
        for round_ in range(repeat):
            for m in (MECHANISMS if round_ % 2 == 0 else MECHANISMS[::-1]):
                cpu_before, started = _cpu_s(gw.proc.pid), time.perf_counter()
                for _ in range(logins):
                    login(port, m)
                seconds = time.perf_counter() - started
                rates[m].append(logins / seconds)
                cpu[m].append((_cpu_s(gw.proc.pid) - cpu_before) / logins * 1e6)
                print(f"round {round_ + 1} {m}: {rates[m][-1]:,.0f} logins/s, "
                      f"gateway {cpu[m][-1]:,.0f} us CPU a login", flush=True)
    finally:
        gw.stop()
    return [{"name": f"sasl_login_{m.lower().replace('-', '_')}", "unit": "logins/s",
             "ours": round(max(rates[m])), "ours_median": round(statistics.median(rates[m])),
             "gateway_cpu_us_per_login_median": round(statistics.median(cpu[m])),
             "baseline_median": round(statistics.median(rates["PLAIN"])),
             "ratio_median": round(statistics.median(rates[m]) /
                                   statistics.median(rates["PLAIN"]), 3),
             "target": None, "runs": repeat, "logins": logins, "mechanism": m,
             "iterations": 4096 if m != "PLAIN" else None}
            for m in MECHANISMS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small and fast (CI)")
    ap.add_argument("--logins", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.quick:
        args.logins, args.repeat = 30, 1
    load_before = machine()
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-sasl-") as root:
        figures = measure(root, args.logins, args.repeat)
    path = write_results("security_sasl", figures, quick=args.quick, repeat=args.repeat,
                         machine_before_run=load_before)
    for f in figures:
        print(f"{f['mechanism']}: {f['ours_median']:,} logins/s, gateway "
              f"{f['gateway_cpu_us_per_login_median']:,} us CPU a login")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
