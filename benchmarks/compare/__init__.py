"""A word count comparison a user can rerun: flamestream vs plain PySpark, Bytewax, Pathway.

``make bench-compare`` (``python -m benchmarks.compare``) generates a Zipf corpus once
(400k lines, 4.8M words, 4 files by default; under ``--work``, default ``.bench/``), then
runs these variants interleaved for ``--rounds`` rounds (3 by default) and checks each one's
final counts against ``collections.Counter``'s:

``flamestream_latest``, ``flamestream_every``
    files front -> ``SparkGraph(split -> flamestream.count -> render, release=...)
    .write_stream`` -> flamestream files sink, ``Trigger.AvailableNow``. Opt-in variants
    (``--variants``): ``flamestream_latest_opaque`` (the count as ``map_reduce`` with a
    lambda mapper) and ``flamestream_latest_apply`` (``apply`` on the loaded front).
``plain_pyspark``
    ``readStream.text`` -> split / explode -> ``groupBy.count`` (update) -> idempotent
    ``foreachBatch``.
``bytewax``, ``pathway``
    the peers' own word counts (``peers/``), each in a virtualenv the harness makes under
    ``<work>/venvs`` and runs as a subprocess.
``counter``
    one ``collections.Counter`` pass in this process: the single-core floor.

It prints one JSON object (medians, every run with the load averages around it, words/s,
ratios, versions) and writes a PNG (``--plot``, default ``docs/img/bench-compare.png``)::

    python -m benchmarks.compare [--lines N] [--files F] [--rounds R] [--variants V ..]
        [--work DIR] [--plot PNG] [--bytewax VERSION] [--pathway VERSION]
"""
