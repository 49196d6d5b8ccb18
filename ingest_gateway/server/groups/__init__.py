"""Consumer groups on the gateway: the coordinator (``coordinator``), its in-memory
group state (``state``), the assignment strategies (``assignors``) and the group
documents in the store (``store``). The protocol types the clients share are in
``ingest_gateway.protocol.groups``; the errors in ``ingest_gateway.errors``.
"""
