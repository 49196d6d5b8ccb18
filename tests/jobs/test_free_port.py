"""``free_port`` (jobs/gateway_process.py): the ports the suite's servers are given."""

from __future__ import annotations

import socket

from jobs.gateway_process import _ephemeral_low, free_port


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    """The kernel hands ephemeral ports to any bind(0) or outgoing connection (a broker
    app's gateway once found Spark's py4j server on the port it was given): the ports
    handed out lie below that range, so only another explicit choice could take one."""
    low = _ephemeral_low()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port < low for port in ports), (low, ports)
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
