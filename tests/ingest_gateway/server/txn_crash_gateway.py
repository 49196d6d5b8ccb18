"""A real gateway that SIGKILLs itself at one chosen step of ending a transaction.

A crash-test hook kept out of the product: run as
``python -m tests.ingest_gateway.server.txn_crash_gateway <jobs.cli arguments>`` it wraps
``log_layout.transactions`` (and the gateway's group-offsets writer) in this process
only, then runs ``jobs.cli`` unchanged. ``TXN_CRASH_AT`` (not a ``SPARKLOG_*``
variable: the gateway refuses unknown ones) names the step, counted from the start of
each ``end_transaction`` (a commit or abort request), in the order of
``log_layout.transactions``' module doc:

- ``decide``: the request arrived, the Prepare* decision is not written yet;
- ``marker:N``: the decision and N markers are written, marker N+1 is not
  (``marker:1`` of a two-partition transaction: between the partitions' markers);
- ``offsets``: every marker written, the group offsets not yet;
- ``complete``: the offsets written, Complete* not yet.

The crashing gateway's timeout aborter is off (``abort_expired`` does nothing): it
also finishes a decided transaction, and would race the request to the markers, so
the crash would not leave exactly the state of its step. Unset, the gateway is an
ordinary one. :class:`CrashingGateway` starts it like
``jobs.gateway_process.GatewayProcess`` does ``jobs.cli``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from jobs.gateway_process import ROOT, START_TIMEOUT_S, GatewayProcess, wait_for

ENV = "TXN_CRASH_AT"
MODULE = "tests.ingest_gateway.server.txn_crash_gateway"


class CrashingGateway(GatewayProcess):
    """A GatewayProcess running this module: ``crash_at`` is the next start's
    ``TXN_CRASH_AT`` (None: an ordinary gateway); ``died()`` waits for the SIGKILL."""

    crash_at: str | None = None

    def start(self) -> "CrashingGateway":
        env = {k: v for k, v in os.environ.items() if k != ENV}
        env["PYTHONPATH"] = ROOT
        if self.crash_at:
            env[ENV] = self.crash_at
        self.proc = self.spawn(MODULE, self.cli_args(), env)
        try:  # as GatewayProcess.start: a failed start leaves no gateway running
            wait_for(self._healthy, timeout=START_TIMEOUT_S, what=f"gateway on port {self.port}")
        except BaseException:
            self.kill()
            raise
        return self

    def died(self, timeout: float = 30) -> int:
        """Wait for the hook's SIGKILL; the exit status (-9)."""
        assert self.proc is not None
        return self.proc.wait(timeout)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str) -> None:
    """Wrap the coordinator's steps so this process dies at ``point`` (module doc)."""
    from ingest_gateway.server import transaction_service
    from log_layout import transactions

    # markers written since the current end_transaction began (None: no end under way;
    # the tests end one transaction at a time). The lock serialises the markers of one
    # end, which the coordinator may write side by side: then "marker:1" leaves exactly
    # one marker, and serial is one of the orders parallel writes may take anyway.
    ending: dict[str, int | None] = {"markers": None}
    lock = threading.Lock()
    real_end, real_marker = transactions.end_transaction, transactions._marker
    real_writer = transaction_service.offsets_writer

    def end_transaction(*args: Any, **kwargs: Any) -> Any:
        if point == "decide":
            _die()
        ending["markers"] = 0
        try:
            return real_end(*args, **kwargs)
        finally:
            ending["markers"] = None

    def marker(*args: Any, **kwargs: Any) -> Any:
        with lock:
            count = ending["markers"]
            if count is None:
                return real_marker(*args, **kwargs)
            if point == f"marker:{count}":
                _die()
            result = real_marker(*args, **kwargs)
            ending["markers"] = count + 1
            return result

    def abort_expired(log: Any, now_ms: int, **_: Any) -> list[str]:
        return []

    def offsets_writer(*args: Any, **kwargs: Any) -> Any:
        write = real_writer(*args, **kwargs)

        def crashing_write(*a: Any, **kw: Any) -> None:
            if point == "offsets":
                _die()
            write(*a, **kw)
            if point == "complete":
                _die()

        return crashing_write

    transactions.end_transaction = end_transaction
    transactions._marker = marker
    transactions.abort_expired = abort_expired
    transaction_service.offsets_writer = offsets_writer


if __name__ == "__main__":
    if os.environ.get(ENV):
        install(os.environ[ENV])
    from jobs import cli

    sys.exit(cli.main(sys.argv[1:]))
