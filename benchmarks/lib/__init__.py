"""What the benchmarks share: session, timing, statistics, workloads, checkpoints and records."""
