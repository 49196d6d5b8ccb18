"""What security costs: produce and fetch through a gateway with TLS, HTTP Basic and ACLs,
against the same gateway in plain HTTP, in the same run.

Two gateway subprocesses on one local store (fsync on, as in production):

* **plain**: ``http://``, no authentication, no authorizer (the baseline);
* **secured**: ``https://`` (a certificate made for the run), HTTP Basic against an
  argon2id password file, the authorizer on with the ACLs ``sparklog acls --producer
  --consumer`` would give the bench's user on its topics and group.

Cases, each measured on both gateways alternately, ``--repeat`` rounds (best and
median of each; the ratio secured / plain of each):

* **batched produce**: ``Producer.send()`` of N records of 100 bytes, ``linger_ms=5``,
  acks=all, 4 partitions (target: ratio >= 0.7, the issue's);
* **fetch**: ``Consumer(...).batches()`` reading those N records back (Arrow over
  ``POST /fetch``);
* **one-record requests**: REST Proxy v2 produce requests of one record, one after the
  other on one keep-alive connection (per-request cost: the TLS record layer, the
  credentials check (cached after the first argon2id verification), the ACL lookup);
* **SASL logins** on the Kafka listener, PLAIN beside SCRAM-SHA-256 and -512
  (``bench/security_sasl.py``: logins per second and the gateway's CPU per login).

Usage: ``python bench/security.py [--quick] [--records N] [--repeat R]``. Writes
``bench/results/security.json``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import urllib3  # noqa: E402

from bench import security_sasl  # noqa: E402
from bench.common import machine, write_results  # noqa: E402
from bench.tls_certs import Pki  # noqa: E402
from ingest_gateway.client import Consumer, Producer  # noqa: E402
from ingest_gateway.security import passwords  # noqa: E402
from jobs.gateway_process import GatewayProcess  # noqa: E402
from log_layout import open_log  # noqa: E402
from log_layout.acls import AclBinding, add_acls  # noqa: E402

USER, PASSWORD = "bench", "bench-password"
VALUE = b"v" * 100
PARTITIONS = 4


def _acls(store) -> None:
    """What ``sparklog acls --add --allow-principal User:bench --producer --consumer
    --topic bench- --resource-pattern-type prefixed --group bench-`` gives."""
    p = f"User:{USER}"
    ops = [("Topic", "Write"), ("Topic", "Describe"), ("Topic", "Create"), ("Topic", "Read"),
           ("Group", "Read")]
    add_acls(store, [AclBinding.create(rtype, "bench-", "PREFIXED", principal=p, operation=op)
                     for rtype, op in ops])


class Side:
    """One gateway and how its clients reach it."""

    def __init__(self, name: str, gw: GatewayProcess, client: dict, http: urllib3.PoolManager,
                 headers: dict):
        self.name, self.gw, self.client, self.http, self.headers = name, gw, client, http, headers

    def produce(self, topic: str, records: int) -> float:
        producer = Producer(self.gw.url, linger_ms=5, acks="all", **self.client)
        started = time.perf_counter()
        for i in range(records):
            producer.send(topic, VALUE, key=str(i % 1000).encode())
        producer.flush()
        seconds = time.perf_counter() - started
        producer.close()
        return records / seconds

    def fetch(self, topic: str, records: int) -> float:
        consumer = Consumer(gateway=self.gw.url, **self.client)
        consumer.assign([(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        got, started = 0, time.perf_counter()
        for batch in consumer.batches():  # blocks for more: the count ends it
            got += batch.records.num_rows
            if got >= records:
                break
        seconds = time.perf_counter() - started
        consumer.close()
        assert got == records, (self.name, got, records)
        return records / seconds

    def single_requests(self, topic: str, requests: int) -> float:
        body = json.dumps({"records": [{"value": "x" * 100}]}).encode()
        headers = {**self.headers, "Content-Type": "application/vnd.kafka.json.v2+json"}
        url = f"{self.gw.url}/topics/{topic}"
        started = time.perf_counter()
        for _ in range(requests):
            r = self.http.request("POST", url, body=body, headers=headers)
            assert r.status == 200, (self.name, r.status, r.data[:300])
        return requests / (time.perf_counter() - started)


def _sides(root: str, store: str) -> tuple[Side, Side]:
    pki = Pki(os.path.join(root, "pki"))
    pw_file = os.path.join(root, "passwords")
    passwords.add(pw_file, USER, PASSWORD)
    common = {"store.fsync": "true"}
    plain = GatewayProcess(store, settings=common)
    secured = GatewayProcess(store, scheme="https", ca_file=pki.ca, settings={
        **common, **pki.ssl_settings(), "authentication.method": "basic",
        "authentication.password.file": pw_file, "authorizer.enabled": "true"})
    with ThreadPoolExecutor(max_workers=2) as pool:  # both start at once (unmeasured)
        starts = [pool.submit(gw.start) for gw in (plain, secured)]
    for gw, start in zip((plain, secured), starts):
        if start.exception() is not None:
            for other in (plain, secured):
                other.stop()
            raise start.exception()
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return (Side("plain", plain, {}, urllib3.PoolManager(retries=False, timeout=30), {}),
            Side("secured", secured,
                 {"ssl_cafile": pki.ca, "sasl_plain_username": USER,
                  "sasl_plain_password": PASSWORD},
                 urllib3.PoolManager(retries=False, timeout=30, ca_certs=pki.ca),
                 {"Authorization": basic}))


def _figure(name: str, unit: str, runs: dict[str, list[float]], target: float | None,
            **extra) -> dict:
    plain, secured = runs["plain"], runs["secured"]
    ratios = [s / p for s, p in zip(secured, plain)]  # rounds are paired: same load
    return {"name": name, "unit": unit, "ours": round(max(secured)),
            "ours_median": round(statistics.median(secured)), "baseline": round(max(plain)),
            "baseline_median": round(statistics.median(plain)),
            "ratio": round(max(secured) / max(plain), 3),
            "ratio_median": round(statistics.median(ratios), 3), "target": target,
            "runs": len(plain), **extra}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small and fast (CI)")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--requests", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--logins", type=int, default=500, help="SASL logins per mechanism")
    args = ap.parse_args()
    if args.quick:
        args.records, args.requests, args.repeat, args.logins = 5_000, 100, 1, 30
    load_before = machine()
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-security-") as root:
        store = os.path.join(root, "store")
        log = open_log(store)
        _acls(log.store)
        sides = _sides(root, store)
        runs: dict[str, dict[str, list[float]]] = {
            case: {"plain": [], "secured": []} for case in ("produce", "fetch", "single")}
        try:
            for round_ in range(args.repeat):
                for side in (sides if round_ % 2 == 0 else sides[::-1]):
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    log.create_topic(topic, {"partitions": PARTITIONS})
                    runs["produce"][side.name].append(side.produce(topic, args.records))
                    runs["fetch"][side.name].append(side.fetch(topic, args.records))
                    runs["single"][side.name].append(side.single_requests(topic, args.requests))
                    print(f"round {round_ + 1} {side.name}: "
                          + ", ".join(f"{c} {r[side.name][-1]:,.0f}/s" for c, r in runs.items()),
                          flush=True)
        finally:
            for side in sides:
                side.gw.stop()
    figures = [
        _figure("batched_produce", "msgs/s", runs["produce"], 0.7, records=args.records,
                value_bytes=len(VALUE), linger_ms=5, acks="all", partitions=PARTITIONS),
        _figure("fetch", "msgs/s", runs["fetch"], None, records=args.records),
        _figure("one_record_requests", "requests/s", runs["single"], None,
                requests=args.requests)]
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-sasl-") as root:
        figures += security_sasl.measure(root, args.logins, args.repeat)
    path = write_results("security", figures, quick=args.quick, repeat=args.repeat,
                         machine_before_run=load_before)
    for f in figures:
        print(f"{f['name']}: secured {f['ours_median']:,} vs plain {f['baseline_median']:,} "
              f"{f['unit']} (median ratio {f['ratio_median']}, target {f['target']})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
