"""A stand-in for a Spark worker module started warm: reports what process it runs as.

``tests/unit/test_warm_start.py`` starts it as ``flamestream-python -m tests.unit.warm_probe
CODE [sleep|hooks|reply]`` against a server speaking the JVM's side of the connect-back
protocol. It sends its pid, parent, arguments, working directory, ``__name__`` and
``PROBE_VALUE`` as JSON (``reply``: then reads 4 bytes, which the server sends late, and writes
them to stderr), writes a line to stdout and to stderr, then sleeps or leaves exit hooks if
asked, and exits with ``CODE``.
"""

from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__":
    from pyspark.serializers import write_with_length
    from pyspark.worker_util import get_sock_file_to_executor

    with get_sock_file_to_executor() as sock_file:
        seen = {
            "ppid": os.getppid(),
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "name": __name__,
            "value": os.environ.get("PROBE_VALUE"),
        }
        write_with_length(json.dumps(seen).encode(), sock_file)
        sock_file.flush()
        if sys.argv[2:] == ["reply"]:  # a read before the JVM writes must wait for it
            print("reply", sock_file.read(4).decode(), file=sys.stderr, flush=True)
    print("probe out", flush=True)
    print("probe err", file=sys.stderr, flush=True)
    if sys.argv[2:] == ["sleep"]:
        time.sleep(60)
    if sys.argv[2:] == ["hooks"]:  # what an interpreter's exit waits for and runs
        import atexit
        import threading

        atexit.register(print, "atexit ran", flush=True)
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
    sys.exit(int(sys.argv[1]))
