"""The comparison's corpus: Zipf-distributed words in text files, generated once and reused.

Line ``i`` holds ``WORDS_PER_LINE`` words drawn with ``random.Random(seed).choices`` from a
``VOCABULARY``-word vocabulary, word of rank ``r`` (1-based) weighted ``1 / r**EXPONENT``;
words are single-space separated, lines end with a newline. The files are written under
``work/corpus-<lines>x<files>-s<seed>/`` (``part-NNN.txt`` only, so every reader can take the
whole directory) with a manifest next to it; a later run with the same parameters reuses them.
"""

from __future__ import annotations

import json
import shutil
import string
from collections import Counter
from dataclasses import asdict, dataclass
from itertools import accumulate
from pathlib import Path
from random import Random

SEED = 13
VOCABULARY = 50_000
EXPONENT = 1.1
WORDS_PER_LINE = 12


@dataclass(frozen=True)
class Corpus:
    """The generated files and what they hold."""

    folder: str  #: the directory of ``part-NNN.txt`` files
    lines: int
    files: int
    seed: int
    words: int  #: whitespace-separated words in all
    distinct: int  #: distinct words
    bytes: int

    @property
    def path(self) -> Path:
        """``folder`` as a path."""
        return Path(self.folder)

    def report(self) -> dict[str, object]:
        """The ``input`` section of the report."""
        return asdict(self) | {
            "words_per_line": WORDS_PER_LINE,
            "vocabulary": VOCABULARY,
            "zipf_exponent": EXPONENT,
        }


def word(rank: int) -> str:
    """The vocabulary's word of 0-based ``rank``: bijective base 26, two letters at least."""
    n, letters = rank + 27, []
    while n:
        n, digit = divmod(n - 1, 26)
        letters.append(string.ascii_lowercase[digit])
    return "".join(reversed(letters))


def count(folder: Path) -> Counter[str]:
    """The words of the ``*.txt`` files in ``folder``, counted in one pass."""
    counts: Counter[str] = Counter()
    for part in sorted(folder.glob("*.txt")):
        with part.open(encoding="utf-8") as lines:
            for text in lines:
                counts.update(text.split())
    return counts


def corpus(work: Path, lines: int, files: int, seed: int = SEED) -> Corpus:
    """The corpus under ``work``: read from its manifest, else generated (then counted) first."""
    name = f"corpus-{lines}x{files}-s{seed}"
    folder, manifest = work / name, work / f"{name}.json"
    if manifest.exists() and folder.is_dir():
        return Corpus(**json.loads(manifest.read_text()))
    staging = work / f"{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    vocabulary = [word(r) for r in range(VOCABULARY)]
    weights = list(accumulate(1 / (r + 1) ** EXPONENT for r in range(VOCABULARY)))
    rng, total = Random(seed), 0
    for f in range(files):
        first, stop = lines * f // files, lines * (f + 1) // files
        drawn = rng.choices(vocabulary, cum_weights=weights, k=(stop - first) * WORDS_PER_LINE)
        text = "".join(
            " ".join(drawn[i : i + WORDS_PER_LINE]) + "\n"
            for i in range(0, len(drawn), WORDS_PER_LINE)
        )
        total += (staging / f"part-{f:03d}.txt").write_bytes(text.encode())
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    counts = count(folder)
    made = Corpus(str(folder), lines, files, seed, counts.total(), len(counts), total)
    manifest.write_text(json.dumps(asdict(made)))
    return made


def mismatch(expected: Counter[str], found: dict[str, int]) -> str | None:
    """Why ``found`` is not ``expected`` (a count and five examples), or None if it is."""
    wrong = sorted(w for w in expected.keys() | found.keys() if found.get(w) != expected[w])
    if not wrong:
        return None
    sample = {w: {"expected": expected[w], "found": found.get(w)} for w in wrong[:5]}
    return f"{len(wrong)} of {len(expected)} words counted wrongly, e.g. {sample}"
