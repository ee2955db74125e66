"""Benchmark workloads and suites (``dpalign bench``), shared with the pytest-benchmark suite."""
