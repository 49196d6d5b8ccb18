"""The ingest gateway: the HTTP server producers post to, and the Python clients."""
