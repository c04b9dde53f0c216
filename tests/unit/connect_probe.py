"""A stand-in for a Spark worker module: records when it was imported, then connects back.

``tests/unit/test_launcher.py`` starts it as ``flamestream-python -m tests.unit.connect_probe``
against a server that speaks the JVM's side of the connect-back protocol.
"""

from __future__ import annotations

import time

IMPORTED_AT = time.time()

if __name__ == "__main__":
    from pyspark.serializers import write_with_length
    from pyspark.worker_util import get_sock_file_to_executor

    with get_sock_file_to_executor() as sock_file:
        write_with_length(repr(IMPORTED_AT).encode(), sock_file)
        sock_file.flush()
