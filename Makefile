# flamestream task runner. `make help` lists the targets.
# The two README commands are `make run` (set up + main job) and `make test` (set up + suite).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SHIM   := $(VENV)/.shim-installed
PRECOMPILED := $(VENV)/.workers-precompiled
SPARK_ZIPS  := $(wildcard $(VENV)/lib/python3*/site-packages/pyspark/python/lib/*.zip)
SHIM_SOURCES := jvm-shim/pom.xml $(wildcard jvm-shim/src/main/java/io/flamestream/shim/*.java)

# Spark's Python processes must start the project's interpreter, not whatever `python3` is on
# PATH. flamestream-python (flamestream.launcher) connects back before it imports pyspark and
# forks warm processes (flamestream.warm_start). Both names: Spark starts a Python data
# source's processes with PYSPARK_DRIVER_PYTHON when it is set, its tasks' with PYSPARK_PYTHON.
export PYSPARK_PYTHON := $(abspath $(VENV)/bin/flamestream-python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(VENV)/bin/flamestream-python)

.PHONY: help setup run test unit lint format bench bench-spark bench-rescale bench-first bench-compare bench-cycles bench-backfill bench-sketches bench-approx-budget soak clean wheel constraints

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

# setup.cfg states the dependency ranges; constraints.txt the exact versions tested (CI's).
$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The JVM shim (plugin + listeners), compiled by Maven against the installed PySpark's jars
# and installed into pyspark/jars, where drivers and executors find it.
$(SHIM): $(STAMP) $(SHIM_SOURCES)
	$(PY) -m flamestream.jvm build
	touch $(SHIM)

# Spark puts pyspark.zip and the py4j zip (sources only) first on every Python process's
# PYTHONPATH; add bytecode to them so those processes do not compile pyspark again on each
# start (python/flamestream/workers.py). Idempotent; reruns after pyspark is reinstalled.
# The project's own modules too: an interpreter that may not write bytecode
# (PYTHONDONTWRITEBYTECODE) compiled them at every start, 10 ms of each flamestream-python's.
$(PRECOMPILED): $(STAMP) python/flamestream/workers.py $(SPARK_ZIPS)
	$(PY) -m flamestream.workers precompile
	$(PY) -m compileall -q python
	touch $(PRECOMPILED)

setup: $(STAMP) $(SHIM) $(PRECOMPILED)  ## create .venv, install flamestream with its dev tools, build the JVM shim, precompile Spark's Python zips

# The wheel users install: py3-none-any, the JVM shim jar inside (setup.py compiles it with
# Maven against the installed PySpark). Built in .venv, which has PySpark (no build isolation);
# a plain `pip wheel .` builds the same in an isolated environment, PySpark fetched into it.
wheel: $(STAMP)  ## build dist/flamestream-<version>-py3-none-any.whl with the JVM shim jar inside
	rm -rf build
	$(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		--wheel-dir dist .
	@ls dist/flamestream-*-py3-none-any.whl

# After a deliberate upgrade in .venv: its exact versions become the tested ones.
constraints: $(STAMP)  ## rewrite constraints.txt from the versions installed in .venv
	{ grep '^#' constraints.txt; $(PY) -m pip list --disable-pip-version-check --format=freeze \
		--exclude-editable | grep -v '^pip==' | sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

run: setup  ## set up, then run the main job (a streaming query on local Spark, see README)
	$(PY) -m flamestream.examples.stream_files

lint: setup  ## ruff (lint + format check), mypy, no function over 80 lines
	$(PY) -m ruff check python tests benchmarks tools
	$(PY) -m ruff format --check python tests benchmarks tools
	$(PY) -m mypy
	$(PY) tools/function_length.py python
	$(PY) tools/function_length.py benchmarks

test: lint  ## set up, lint, then run the whole test suite
	$(PY) -m pytest

unit: setup  ## the fast unit tier (no Spark, a fifth of each property's examples; CI draws all)
	FLAMESTREAM_EXAMPLES=fast $(PY) -m pytest tests/unit

bench: setup  ## run the benchmark harness, print JSON ratios
	$(PY) -m benchmarks.bench

bench-spark: setup  ## Spark benchmarks: connectors vs built-ins, graphs vs plain PySpark, barrier, controller, skew, budgets, worker memory, per-batch cost, rescale on a growing cluster, the first query
	$(PY) -m benchmarks.spark_passthrough
	$(PY) -m benchmarks.spark_kafka
	$(PY) -m benchmarks.spark_graphs
	$(PY) -m benchmarks.spark_barrier
	$(PY) -m benchmarks.spark_controller
	$(PY) -m benchmarks.spark_skew
	$(PY) -m benchmarks.spark_budgets
	$(PY) -m benchmarks.spark_memory
	$(PY) -m benchmarks.spark_batches
	$(PY) -m benchmarks.spark_rescale $(RESCALE_ARGS)
	$(PY) -m benchmarks.first_query $(FIRST_ARGS)

# A new user's first query: the README's word count from a fresh process to its first released
# row, against plain PySpark's, each run a fresh process. Flags: FIRST_ARGS, e.g. "--repeat 3".
bench-first: setup  ## the first query: README word count vs plain PySpark, fresh process to first released row: JSON
	$(PY) -m benchmarks.first_query $(FIRST_ARGS)

# A standalone cluster on this machine, one 1-core Worker and a second joining mid-run: the
# active partitions follow the cores, against Spark's stop + state repartition + restart.
# Flags: RESCALE_ARGS, e.g. make bench-rescale RESCALE_ARGS="--rows-per-batch 5000 --batches 10".
bench-rescale: setup  ## rescale on a growing standalone cluster vs Spark's stop/repartition/restart: JSON
	$(PY) -m benchmarks.spark_rescale $(RESCALE_ARGS)

# Cycles at scale: connected components on growing graphs and a record fanned out to growing
# numbers of rows of one global time, on the reference runtime and on Spark; time per row per
# size. Flags: CYCLES_ARGS, e.g. make bench-cycles CYCLES_ARGS="--runtimes reference
# --components-sizes 300 1000 --fanout-sizes 1000 10000".
bench-cycles: setup  ## cycles at scale: components and one global time's fan-out, time per row per size (JSON)
	$(PY) -m benchmarks.cycles_scale $(CYCLES_ARGS)

# History then live: a Delta history of BACKFILL records then live files, against streaming the
# history in micro-batches and against a bounded read of it (the batch job), for the declared
# word count and the per-key gaps with lambdas. Flags: BACKFILL_ARGS, e.g.
# make bench-backfill BACKFILL_ARGS="--records 10000000 --repeat 2".
bench-backfill: setup  ## history then live vs streaming the history and vs a bounded read: JSON
	$(PY) -m benchmarks.backfill $(BACKFILL_ARGS)

# Sketches (issue 41): distinct users per key, flamestream's HLL against the exact set a user
# writes and against Spark's approx_count_distinct and hll_sketch_agg; p99 per key, KLL against
# a sorted tuple. Throughput, state per key, peak worker memory, the sketches' errors. Flags:
# SKETCHES_ARGS, e.g. make bench-sketches SKETCHES_ARGS="--events 20000 --keys 200
# --quantile-keys 2 --batch 5000 --rounds 1".
bench-sketches: setup  ## sketches vs exact state and vs Spark's approx_count_distinct / hll_sketch_agg: throughput, state per key, error (JSON)
	$(PY) -m benchmarks.sketches $(SKETCHES_ARGS)

# Exact or approximate under a state budget (#41): exact-only (read limit throttled by the
# budget), approximate-only (distinct_count) and the policy (exact_or_approximate), each run a
# fresh process, interleaved, medians. Flags: APPROX_BUDGET_ARGS, e.g.
# make bench-approx-budget APPROX_BUDGET_ARGS="--rows 50000 --budget-kb 500 --repeat 2".
bench-approx-budget: setup  ## exact-only vs approximate-only vs the sketching budget policy: memory, p99, throughput, approximate share (JSON)
	$(PY) -m benchmarks.approx_budget $(APPROX_BUDGET_ARGS)

# Word count against plain PySpark (built-ins, and the split as an Arrow Python UDF), Bytewax
# 0.21.1, Pathway 0.33.0 and collections.Counter; gaps between a key's events against
# applyInPandasWithState / transformWithStateInPandas. The peers run in virtualenvs made under
# .bench/venvs on first use. Flags: COMPARE_ARGS,
# e.g. make bench-compare COMPARE_ARGS="--lines 20000 --events 40000 --rounds 1".
bench-compare: setup  ## word count and per-key gaps vs PySpark (built-ins, UDFs, pandas state), Bytewax, Pathway, Counter: JSON + docs/img/bench-compare.png
	$(PY) -m benchmarks.compare $(COMPARE_ARGS)

# A grouping graph on appended files for SOAK_MINUTES at SOAK_RATE lines/s (by hand, not in
# CI): file counts, output, batch durations and every process's memory over time, as JSON
# lines, then slopes per minute and an exactly-once check. More flags: SOAK_ARGS, e.g.
# make soak SOAK_MINUTES=60 SOAK_ARGS="--files 4 --keys 1000 --every 60".
SOAK_MINUTES ?= 60
SOAK_RATE ?= 3000
soak: setup  ## soak benchmark: a grouping graph for SOAK_MINUTES at SOAK_RATE lines/s; do files and memory stay flat?
	$(PY) -m benchmarks.soak --minutes $(SOAK_MINUTES) --rate $(SOAK_RATE) $(SOAK_ARGS)

format: setup  ## apply ruff's fixes and formatting
	$(PY) -m ruff check --fix python tests benchmarks
	$(PY) -m ruff format python tests benchmarks

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
