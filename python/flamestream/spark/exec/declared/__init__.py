"""Arrow paths for declared steps (``count``, map_reduce's sums, ``Template``): shortcuts."""
