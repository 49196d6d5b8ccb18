"""Entry points: the ``sparklog`` CLI, spark-submit scripts and scheduled maintenance."""
