"""Which partition each row the sink writes goes to: Kafka's default partitioner.

A row's ``partition`` column wins; else a keyed row goes to
``toPositive(murmur2(key)) % partitions`` -- Kafka's Java client's choice, so a key
lands where a Kafka producer (and sparklog's gateway and ``Producer``) put it -- and
keyless rows are sticky (KIP-480): one task's keyless rows of one input batch go to
one partition, the next batch to the next one round-robin, starting at the task's
partition id so tasks spread out.

Keyed rows are hashed whole Arrow columns at a time with
``log_layout.partitioner.key_partitions`` (the same murmur2 as the gateway's, vectorised).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from log_layout.partitioner import key_partitions


class Assigner:
    """Partitions for one task's rows of one topic (see the module docstring)."""

    def __init__(self, first_sticky: int):
        self._sticky: dict[str, int] = {}
        self._first = first_sticky

    def assign(self, topic: str, partitions: int, keys: pa.Array | None,
               explicit: pa.Array | None) -> np.ndarray:
        """The partition of each row: ``explicit`` where not null, else by key, else
        sticky. ``explicit`` values are not range-checked here (the caller does)."""
        n = len(keys) if keys is not None else len(explicit) if explicit is not None else 0
        sticky = self._sticky.get(topic, self._first) % partitions
        self._sticky[topic] = sticky + 1  # the next batch's keyless rows move on
        out = np.full(n, sticky, dtype=np.int64)
        # masks stay Arrow (indices_nonzero): numpy's view of a boolean Arrow array goes
        # through pandas, whose import cost 1.2 s in each new Python worker (profiled)
        if keys is not None and keys.null_count < len(keys):
            valid = keys.is_valid()
            rows = pc.indices_nonzero(valid).to_numpy()
            out[rows] = key_partitions(keys.filter(valid), partitions)
        if explicit is not None and explicit.null_count < len(explicit):
            valid = explicit.is_valid()
            rows = pc.indices_nonzero(valid).to_numpy()
            out[rows] = explicit.filter(valid).to_numpy().astype(np.int64)
        return out
