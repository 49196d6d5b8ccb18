"""Time and size retention and deletion of unreferenced files.

``policy`` holds Kafka's retention rules for one partition, ``vacuum`` deletes
the files no manifest names any more; ``jobs.maintain`` runs them as a Spark job.
"""
