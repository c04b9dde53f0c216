"""The benchmark harness: python -m benchmarks.bench."""
