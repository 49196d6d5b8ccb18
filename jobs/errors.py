"""Typed errors of the ``sparklog`` command line (``jobs.cli`` prints them on one line)."""

from __future__ import annotations

from conf.errors import SparklogError


class QueryError(SparklogError, ValueError):
    """Spark refused a ``sparklog sql`` query (syntax, unknown table or column...)."""

    code = "invalid_query"

    def __init__(self, query: str, reason: str):
        self.query, self.reason = query, reason
        shown = query if len(query) <= 80 else query[:77] + "..."
        super().__init__(f"query {shown!r} failed: {reason}")
