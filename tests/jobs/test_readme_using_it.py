"""The README's "Using it" sequence runs as a new user would type it.

The first ``sh`` block under "## Using it" runs line by line in ``bash -e`` in an empty
folder (the store is ``./sparklog-data``, the default), with two changes a terminal
makes for a person anyway: the gateway's port is a free one (``8082`` replaced, and
``SPARKLOG_GATEWAY_PORT`` set so commands find it by default, as they find 8082), and
after the line that starts the gateway in the background the script waits until it
answers (a person types slower than that). Spark runs for ``materialize`` and ``sql``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from jobs.gateway_process import ROOT, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def using_it_block() -> str:
    """The first ``sh`` block of the README's "Using it" section."""
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("\n## Using it\n"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def as_script(block: str, port: int) -> str:
    """``block`` on ``port``, waiting for a background gateway to answer before going on,
    which is stopped at the end."""
    lines = ["set -e", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for line in block.replace("8082", str(port)).splitlines():
        lines.append(line)
        if line.split("#")[0].rstrip().endswith("&"):
            lines.append(f"for i in $(seq 1 300); do curl -sf localhost:{port}/topics >/dev/null "
                         f"&& break; sleep 0.2; done")
    return "\n".join(lines) + "\n"


def test_the_readme_sequence_runs_as_written(tmp_path):
    block = using_it_block()
    assert "sparklog materialize" in block and "sparklog sql" in block  # the block found
    port = free_port()
    # a new user's environment: no sparklog settings but the port
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPARKLOG_")}
    env.update(SPARKLOG_GATEWAY_PORT=str(port),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    run = subprocess.run(["bash", "-c", as_script(block, port)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # the curl record and the 100,000 produced lines, all JSON objects, in the table
    assert re.search(r"\b100001\b", run.stdout), run.stdout[-3000:]
    assert "Processed a total of 5 messages" in run.stdout + run.stderr
    assert "my-group" in run.stdout
