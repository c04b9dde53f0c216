"""A comparison a user can rerun: flamestream vs PySpark, Bytewax, Pathway, on two workloads.

``make bench-compare`` (``python -m benchmarks.compare``) generates its inputs once (under
``--work``, default ``.bench/``): a Zipf word corpus (400k lines, 4.8M words, 4 files by
default) and an event corpus for the gaps workload (``--events`` JSON lines of ``--keys``
keys in ``--event-files`` files, :mod:`benchmarks.compare.events`). Then it runs the
variants interleaved for ``--rounds`` rounds and checks every run's output: the word counts
against ``collections.Counter``'s, the gaps against a plain-Python reference.

Word count:

``flamestream_latest``, ``flamestream_every``
    files front -> ``SparkGraph(split -> flamestream.count -> render, release=...)
    .write_stream`` -> flamestream files sink, ``Trigger.AvailableNow``. Opt-in variant
    (``--variants``): ``flamestream_latest_apply`` (``apply`` on the loaded front).
``flamestream_lambdas``
    word count latest written with lambdas (``map_reduce(mapper=lambda w: (w, 1))``, a
    lambda render): the general path.
``flamestream_readme``, ``flamestream_readme_apply``
    the README's first graph (``map_reduce`` with a lambda mapper and reducer, the
    ``Reduced`` items to the sink, ``release="every"``) into the JSON files sink, through
    ``write_stream`` and through ``apply`` on the loaded front. With them (or
    ``flamestream_lambdas``) the report's ``own_work`` is measured in process
    (:mod:`benchmarks.compare.own_work`, ``--own-work-lines``): flamestream's own work per
    word around the lambdas.
``plain_pyspark``
    ``readStream.text`` -> split / explode -> ``groupBy.count`` (update) -> idempotent
    ``foreachBatch``.
``pyspark_udf``
    the same with the split as an Arrow-optimized Python UDF: ``flamestream_lambdas``' peer.
``bytewax``, ``pathway``
    the peers' own word counts (``peers/``), each in a virtualenv the harness makes under
    ``<work>/venvs`` and runs as a subprocess.
``counter``
    one ``collections.Counter`` pass in this process: the single-core floor.

Gaps between a key's consecutive events (:mod:`benchmarks.compare.spark_gaps`):

``flamestream_gaps``
    files front (``clock=record``) -> parse -> ``grouping(window=2)`` -> gap, lambdas.
``pyspark_gaps_pandas_state``, ``pyspark_gaps_transform_with_state``
    the same logic in ``applyInPandasWithState`` / ``transformWithStateInPandas``.

It prints one JSON object (medians, every run with the load averages around it, words/s or
events/s, ratios, versions) and writes a PNG (``--plot``, default
``docs/img/bench-compare.png``, a panel per workload)::

    python -m benchmarks.compare [--lines N] [--files F] [--events E] [--event-files F]
        [--keys K] [--rounds R] [--warmup W] [--variants V ..] [--work DIR] [--plot PNG]
        [--bytewax VERSION] [--pathway VERSION]
"""
