"""Time and size retention and deletion of unreferenced files, as a Spark job."""
