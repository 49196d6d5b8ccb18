"""What every benchmark shares: the machine line and the results file.

Figures go to ``bench/results/<name>.json`` in the DESIGN.md format; a
``--quick`` run (what CI executes so no benchmark rots) writes
``<name>.quick.json`` instead, so it never overwrites the committed full-run
figures.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")


def machine() -> str:
    """Cores, memory, OS, Python, pyarrow and the load average at the time of the run."""
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) // 1024 // 1024} GiB RAM, "
    except OSError:
        pass
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (f"{os.cpu_count()} cores, {mem}{platform.system()} {platform.machine()}, "
            f"python {platform.python_version()}, pyarrow {pa.__version__}{load}")


def results_path(name: str, quick: bool) -> str:
    return os.path.join(RESULTS, f"{name}.quick.json" if quick else f"{name}.json")


def write_results(name: str, figures: Sequence[dict[str, Any]], *, quick: bool,
                  out: str | None = None, **meta: Any) -> str:
    """Write the DESIGN.md results document; returns its path."""
    doc = {"bench": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": machine(), "quick": quick, **meta, "figures": list(figures)}
    path = out or results_path(name, quick)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return path
