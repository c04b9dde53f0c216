"""A Spark Python worker's one-time setup and its garbage collector's pause per batch."""
