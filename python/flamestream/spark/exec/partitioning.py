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

_MASK = 0xFFFFFFFF


_C1, _C2 = 0xCC9E2D51, 0x1B873593


#: The column that carries a keyed stage's row's key partition through the shuffle: the
#: partition is part of the row, so a keyed task's state never depends on where Spark's plan
#: numbers the task (see :func:`flamestream.spark.exec.keyed.key_partition`).
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
