"""The gateway's security: who a client is, what it may do, how fast it may go.

README "Security" is the user's guide. Settings: ``[ssl]``, ``[authentication]``,
``[authorizer]`` and ``gateway.access.control.allow.*`` (conf/defaults.toml).

- ``tls``: the server's SSL context from ``[ssl]`` (https listeners, client
  certificates).
- ``authentication``: ``Authenticator.authenticate(scope) -> "User:<name>"`` from HTTP
  Basic (argon2id password file, ``passwords``), a JWT bearer token, or the client
  certificate's subject; raises ``NotAuthenticated`` (401).
- ``authorizer``: Kafka's ACL model over the ACLs kept in the store
  (``log_layout.acls``): principal, host, operation, resource pattern, allow/deny with
  deny winning, ``super.users``, ``allow.everyone.if.no.acl.found``.
- ``quotas``: per-principal ``producer_byte_rate`` / ``consumer_byte_rate`` kept in the
  store (``log_layout.quotas``), enforced by throttling as Kafka does.
- ``route_acls`` / ``ingest_gateway.http.guard``: which operation on which resource
  each route needs, and the ASGI layer that checks all of the above on every request.

The principal of an unauthenticated request (no ``authentication.method``) is
``User:ANONYMOUS``, as in Kafka.
"""

#: Kafka's principal of a client that did not authenticate
ANONYMOUS = "User:ANONYMOUS"
