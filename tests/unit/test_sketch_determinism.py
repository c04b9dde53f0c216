"""A KLL sketch folded with ``kll_update`` has the same bytes in every process; a plain one not.

DataSketches' KLL keeps the odd or the even items of a level it compacts by a random bit from
a generator seeded per process (by the clock), so the same values fed in the same order give
other bytes in another process. :func:`flamestream.approx.folds.kll_update` makes the bit a
function of the sketch and the value. Each side runs in fresh interpreters (a generator's
state is per process, so one process could not show the difference), on values that make
many compactions (k=8, 5,000 distinct values).
"""

from __future__ import annotations

import subprocess
import sys

#: Folds VALUES values into a KLL doubles sketch of size K; prints the sketch's bytes (hex) and
#: how many updates compacted. ``coin``: through kll_update; ``plain``: DataSketches' update.
CHILD = """
import sys
import datasketches as ds
from flamestream.approx.folds import kll_update
K, VALUES = 8, 5000
sketch = ds.kll_doubles_sketch(K)
compactions = 0
for i in range(VALUES):
    value = float(i * 7919 % 5003)  # distinct: the odd and the even items always differ
    retained = sketch.num_retained
    if sys.argv[1] == "coin":
        sketch = kll_update(sketch.serialize(), value)
    else:
        sketch.update(value)
    compactions += sketch.num_retained != retained + 1
assert sketch.n == VALUES and sketch.is_estimation_mode()
print(sketch.serialize().hex(), compactions)
"""


def fold_in_fresh_processes(*modes: str) -> list[tuple[str, int]]:
    """Run the child once per mode, all at once; each one's (sketch hex, compactions)."""
    children = [
        subprocess.Popen(  # this interpreter, a fixed script
            [sys.executable, "-c", CHILD, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in modes
    ]
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-3000:]
        sketch, compactions = out.split()
        results.append((sketch, int(compactions)))
    return results


def test_kll_update_folds_to_the_same_bytes_in_every_process_and_plain_kll_does_not():
    """Two processes folding through ``kll_update``: the same bytes after hundreds of
    compactions. Three folding with DataSketches' own update: not all the same (the coin
    matters). Each of those has hundreds of compactions, each a bit from a generator seeded
    apart per process, so all three equal would take the same long bit sequence three times
    (odds far below 2**-64): a difference is certain, not flaky."""
    (coin_a, count_a), (coin_b, count_b), *plain = fold_in_fresh_processes(
        "coin", "coin", "plain", "plain", "plain"
    )
    assert count_a == count_b > 500  # 784: many compactions, each one a coin flip
    assert coin_a == coin_b
    assert all(count > 500 for _, count in plain)
    assert len({sketch for sketch, _ in plain}) > 1, "plain KLL folded to one sketch 3 times"
