"""Time and size retention and deletion of unreferenced files.

``policy`` holds Kafka's retention rules for one partition and the vacuum of
files no manifest names; ``jobs.maintain`` runs them as a Spark job.
"""
