"""What both sides of the gateway's HTTP protocol share, and nothing of either side.

- ``groups``: the consumer-group protocol's types (strategies, a member's state as JSON,
  topic-partitions, group-id rules, what a consumer calls on an in-process coordinator),
  answered by ``server.groups`` and read by the clients;
- ``group_offsets``: a group's committed offsets in the store without a coordinator
  (a direct consumer, the CLI) and the check of offsets the coordinator commits;
- ``session``: the one HTTP session to a gateway (keep-alive pool, retry policy), used
  by the clients and by a gateway forwarding a group call to its coordinator;
- ``connection_security``: TLS and credentials for that session.

``server`` and ``client`` both import these and never each other; a client process
may load them (no Starlette, no uvicorn).
"""
