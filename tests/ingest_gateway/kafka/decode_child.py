"""A child process that decodes hostile Kafka requests as the listener does.

``python -m tests.ingest_gateway.kafka.decode_child CASES`` reads a pickled list of
(api key, version, body) and runs ``wire.parse_request`` (the bounds check, then kio)
on each framed request. Before each case it prints ``case N`` (flushed), so when
native code aborts the parent knows which bytes did it; at the end it prints
``done <parsed> <refused>``. A Python exception other than ProtocolError fails it.
"""

from __future__ import annotations

import pickle
import sys

from ingest_gateway.errors import ProtocolError
from ingest_gateway.kafka import wire
from tests.ingest_gateway.kafka.fuzz_cases import header, offered


def main(path: str) -> None:
    with open(path, "rb") as f:
        cases = pickle.load(f)
    table = offered()
    parsed = refused = 0
    for i, (api_key, version, body) in enumerate(cases):
        print(f"case {i}", flush=True)
        try:
            wire.parse_request(header(api_key, version) + body, table)
            parsed += 1
        except ProtocolError:
            refused += 1
    print(f"done {parsed} {refused}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
