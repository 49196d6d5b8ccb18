"""schemathesis fuzzes the consumer routes (``openapi_consumers.consumer_paths``) against a live
gateway: no input may cause a 5xx. Same approach as test_fuzz.py (CLI in a subprocess);
``SPARKLOG_FUZZ_EXAMPLES=N`` runs N examples per operation instead of 10."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ingest_gateway.http.openapi import document
from ingest_gateway.http.openapi_consumers import consumer_paths
from log_layout import open_log
from jobs.gateway_process import GatewayProcess

pytestmark = pytest.mark.slow


def test_no_input_to_the_consumer_routes_causes_a_server_error(tmp_path):
    url = str(tmp_path / "store")
    open_log(url).create_topic("fuzz", {"partitions": 2})
    doc = document()
    doc["paths"] = consumer_paths()
    schema = tmp_path / "consumer-openapi.json"
    schema.write_text(json.dumps(doc))
    schemathesis = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    with GatewayProcess(url, settings={"gateway.linger.ms": 1},
                        log_path=str(tmp_path / "gateway.log")) as gw:
        run = subprocess.run(
            [schemathesis, "run", str(schema), "--url", gw.url, "--checks", "not_a_server_error",
             "--max-examples", os.environ.get("SPARKLOG_FUZZ_EXAMPLES", "10"),
             "--phases", "examples,fuzzing", "--seed", "7",
             "--request-timeout", "30", "--no-color"],
            capture_output=True, text=True, timeout=400, cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:] + open(tmp_path / "gateway.log").read()[-4000:]
    assert "passed" in output
    print(output[-3000:])
