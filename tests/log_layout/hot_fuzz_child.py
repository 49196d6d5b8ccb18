"""Hostile bytes in a hot journal's entry or shared object, read back (run as a child
process by tests/log_layout/test_hot_fuzz.py: native code, pyarrow's IPC reader, dies
by abort, not by exception).

``python -m tests.log_layout.hot_fuzz_child ROOT CASES SEED``: ROOT is a local store
whose topic ``t`` was written through a journal. Each case mutates one entry or one
object (flipped bytes, a cut, bytes inserted, a JSON field replaced), then a fresh
reader reads every partition. Each outcome must be the records as written or a typed
error (CorruptHotEntry, CorruptManifest, CorruptSegment, MissingSegment): never other
records, never another exception. Prints one JSON line of outcome counts; exits 1 with
the case on the first wrong answer.
"""

from __future__ import annotations

import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from log_layout import open_log, paths  # noqa: E402
from log_layout.errors import CorruptManifest, CorruptSegment, MissingSegment  # noqa: E402

TYPED = (CorruptManifest, CorruptSegment, MissingSegment)  # CorruptHotEntry is a CorruptManifest


def _read_all(root: str) -> dict[int, list]:
    log = open_log(root)
    out = {}
    for plog in log.partitions("t"):
        t = plog.read_table(plog.log_start_offset())
        out[plog.partition] = list(zip(t.column("offset").to_pylist(),
                                       t.column("value").to_pylist()))
    return out


def _mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 and b:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1 and b:
        del b[rng.randrange(len(b)):]
    elif kind == 2:
        at = rng.randrange(len(b) + 1)
        b[at:at] = rng.randbytes(rng.randint(1, 64))
    elif kind == 3:
        for field in (b'"next_offset":', b'"position":[', b'"bytes":[', b'"count":[',
                      b'"base_offset":[', b'"partitions":[', b'"object":'):
            i = b.find(field)
            if i >= 0 and rng.random() < 0.5:
                j = i + len(field)
                b[j:j + 1] = str(rng.choice([-1, 0, 1, 7, 2**40, 2**63])).encode()
                break
    else:
        b = bytearray(rng.randbytes(rng.randint(0, 200)))
    return bytes(b)


def main(root: str, cases: int, seed: int) -> int:
    rng = random.Random(seed)
    want = _read_all(root)
    files = []
    for journal in os.listdir(os.path.join(root, paths.HOT_FOLDER)):
        folder = os.path.join(root, paths.HOT_FOLDER, journal)
        files += [os.path.join(folder, f) for f in sorted(os.listdir(folder))]
    counts: dict[str, int] = {}
    for case in range(cases):
        path = rng.choice(files)
        with open(path, "rb") as f:
            original = f.read()
        with open(path, "wb") as f:
            f.write(_mutate(original, rng))
        try:
            got = _read_all(root)
            outcome = "same" if got == want else "WRONG"
        except TYPED as e:
            outcome = type(e).__name__
        except Exception as e:  # noqa: BLE001 -- any other exception is a finding
            outcome = f"UNTYPED {type(e).__name__}: {e}"
        finally:
            with open(path, "wb") as f:
                f.write(original)
        if outcome == "WRONG" or outcome.startswith("UNTYPED"):
            print(json.dumps({"case": case, "file": os.path.basename(path),
                              "outcome": outcome}), flush=True)
            return 1
        counts[outcome] = counts.get(outcome, 0) + 1
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
