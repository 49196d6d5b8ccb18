"""A real HDFS on this machine for the tests and the benchmarks (``minihdfs``)."""

from bench.hdfs_side.minihdfs import MiniHdfs

__all__ = ["MiniHdfs"]
