"""schemathesis fuzzes /openapi.json against a live gateway: no input may cause a 5xx.

The schemathesis CLI runs in a subprocess (its pytest plugin does not load under
this pytest); it checks ``not_a_server_error`` only, up to 6 examples for each
of the ~38 operation and media-type pairs (about 200 requests), with a fixed seed.
``SPARKLOG_FUZZ_EXAMPLES=N`` runs N examples each instead (see test_http_fuzz.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from log_layout import open_log
from jobs.gateway_process import GatewayProcess

pytestmark = pytest.mark.slow


def test_no_input_causes_a_server_error(tmp_path):
    url = str(tmp_path / "store")
    open_log(url).create_topic("fuzz", {"partitions": 2})
    schemathesis = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    with GatewayProcess(url, settings={"gateway.linger.ms": 1},
                        log_path=str(tmp_path / "gateway.log")) as gw:
        run = subprocess.run(
            [schemathesis, "run", f"{gw.url}/openapi.json", "--checks", "not_a_server_error",
             "--max-examples", os.environ.get("SPARKLOG_FUZZ_EXAMPLES", "6"),
             "--phases", "examples,fuzzing", "--seed", "7",
             "--request-timeout", "30", "--no-color"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    print(output)
    assert "passed" in output
