"""``python -m benchmarks.compare``: see the package's docstring."""

from benchmarks.compare.harness import main

raise SystemExit(main())
