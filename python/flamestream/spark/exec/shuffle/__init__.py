"""Item rows through Spark's shuffle: packed per distinct item, or in blocks per key partition."""
