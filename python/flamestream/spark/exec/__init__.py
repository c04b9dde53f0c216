"""What runs on executors: item rows, stateless and keyed stages, the fast path, routing."""
