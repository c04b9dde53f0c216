"""Which key partition a row lands in: Spark's hash partitioning, computed in Python.

A keyed stage is shuffled with ``repartition(n, "key")``: Spark puts a row in partition
``pmod(murmur3_x86_32(key, seed 42), n)`` (``HashPartitioning``, the same hash as SQL's
``hash()``). The keyed tasks need the same answer without Spark: an item coming round a cycle
with a new key may stay in its task only if its key lives there; and a row meant for *every*
partition (an invalidator, see :mod:`flamestream.spark.apply`) is copied once per partition
with a *salt* key chosen to land in that partition.

>>> partition_of(b"shello", 4) in range(4)
True
>>> [partition_of(salt, 3) for salt in salts(3)]
[0, 1, 2]
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pyarrow as pa

_MASK = 0xFFFFFFFF


_C1, _C2 = 0xCC9E2D51, 0x1B873593


#: The column that carries a keyed stage's row's key partition through the shuffle: the
#: partition is part of the row, so a keyed task's state never depends on where Spark's plan
#: numbers the task (see :func:`flamestream.spark.exec.general.keyed.key_partition`).
KEY_PARTITION = "part"


#: Salt keys start with a byte no encoded payload starts with (tags are ``s``, ``b``, ``p``).
SALT_PREFIX = b"\x00"


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def spark_hash(data: bytes, seed: int = 42) -> int:
    """Spark's ``hash()`` of a binary value (``Murmur3_x86_32.hashUnsafeBytes``), signed.

    Spark hashes the 4-byte-aligned prefix as little-endian ints, then each remaining byte
    *as a signed int on its own* (its legacy variant, which partitioning still uses).
    """
    h1 = seed & _MASK
    aligned = len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for byte in data[aligned:]:
        signed = byte - 256 if byte > 127 else byte
        h1 = _mix_h1(h1, _mix_k1(signed & _MASK))
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_hashes(keys: pa.Array, seed: int = 42) -> np.ndarray:
    """:func:`spark_hash` of every value of a binary array at once (int32; a null: ``seed``).

    The same steps, each over all the keys that have that step: the keys ordered by their
    number of 4-byte words, so those with a word ``i`` are a prefix.
    ``tests/unit/test_blocks.py`` checks it against :func:`spark_hash`, and
    ``tests/spark/test_partition_identity.py`` against Spark's ``hash()``.
    """
    keys = keys.cast(pa.binary())
    n = len(keys)
    _, offsets_buffer, data_buffer = keys.buffers()
    if not n:
        return np.zeros(0, np.int32)
    offsets = np.frombuffer(offsets_buffer, np.int32)[keys.offset : keys.offset + n + 1]
    lengths = np.diff(offsets).astype(np.int64)
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0)
    words = lengths // 4
    order = np.argsort(-words, kind="stable")
    starts, words, lengths = offsets[:-1][order].astype(np.int64), words[order], lengths[order]
    hashes = np.full(n, seed, np.uint32)
    for i in range(int(words[0])):
        having = int(np.searchsorted(-words, -i, side="left"))  # the keys with > i words
        at = starts[:having] + 4 * i
        word = data[at].astype(np.uint32)
        for byte in (1, 2, 3):
            word |= data[at + byte].astype(np.uint32) << np.uint32(8 * byte)
        hashes[:having] = _mix_h1s(hashes[:having], _mix_k1s(word))
    tails = lengths - 4 * words
    for j in range(3):
        tailed = np.flatnonzero(tails > j)
        if len(tailed):
            signed = data[starts[tailed] + 4 * words[tailed] + j].view(np.int8)
            hashes[tailed] = _mix_h1s(hashes[tailed], _mix_k1s(signed.astype(np.int32)))
    hashes ^= lengths.astype(np.uint32)
    out = np.empty(n, np.uint32)
    out[order] = _fmix(hashes)
    if keys.null_count:  # Spark's hash of a null is the seed
        out[~keys.is_valid().to_numpy(zero_copy_only=False)] = np.uint32(seed)
    return out.view(np.int32)


def partitions_of(keys: pa.Array, partitions: int) -> np.ndarray:
    """:func:`partition_of` of every key at once (Spark's ``pmod(hash(key), n)``)."""
    return np.mod(spark_hashes(keys).astype(np.int64), partitions)


def _rotls(values: np.ndarray, bits: int) -> np.ndarray:
    return (values << np.uint32(bits)) | (values >> np.uint32(32 - bits))


def _mix_k1s(k1: np.ndarray) -> np.ndarray:
    k1 = k1.astype(np.uint32, copy=False) * np.uint32(_C1)
    return _rotls(k1, 15) * np.uint32(_C2)


def _mix_h1s(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    h1 = _rotls(h1 ^ k1, 13)
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray) -> np.ndarray:
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 ^= h1 >> np.uint32(13)
    h1 = h1 * np.uint32(0xC2B2AE35)
    mixed: np.ndarray = h1 ^ (h1 >> np.uint32(16))
    return mixed


def partition_of(key: bytes, partitions: int) -> int:
    """The partition ``repartition(partitions, "key")`` puts a row with ``key`` in."""
    return spark_hash(key) % partitions  # Python's % is already Spark's pmod for n > 0


def landing_keys(prefix: bytes, partitions: int) -> tuple[bytes, ...]:
    """One value per partition, starting with ``prefix``, that Spark's hash puts there."""
    found: dict[int, bytes] = {}
    candidate = 0
    while len(found) < partitions:
        key = prefix + candidate.to_bytes(4, "big")
        found.setdefault(partition_of(key, partitions), key)
        candidate += 1
    return tuple(found[p] for p in range(partitions))


@cache
def salts(partitions: int) -> tuple[bytes, ...]:
    """One key per partition that lands there: ``salts(n)[p]`` goes to partition ``p``."""
    return landing_keys(SALT_PREFIX, partitions)


def is_salt(key: bytes | None) -> bool:
    """Whether ``key`` is a salt (the row is a copy meant for one partition)."""
    return key is not None and key[:1] == SALT_PREFIX
