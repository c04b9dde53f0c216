"""Grouping keys as bytes, and the key slot a key lives in: one rule for every layer.

The Spark runtime's keyed stages bucket a key by its tagged bytes (:func:`encode_key`) and
lay keys out over partitions by slot (:func:`slot_of`: CRC-32 of those bytes, modulo the
slots), and the approximate aggregations' sketch schedule decides per slot
(:mod:`flamestream.approx.schedule`); both import the rule from here, below them both.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Hashable
from typing import Any

#: The tags of an encoded key or payload: text, bytes, a pickle.
TEXT_TAG, BYTES_TAG, PICKLE_TAG = b"s", b"b", b"p"

#: The pickle protocol of encoded payloads and keys.
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


def encode_key(key: Any) -> bytes:
    """The tagged bytes of a grouping key (text, bytes or a pickle; never ``m``/``r``).

    Raises ``TypeError`` for a key that cannot key a bucket (a list, a dict, a set) before
    the shuffle, where the item's determinant is still known, rather than in the keyed stage.

    >>> encode_key(("a", 1))[:1], encode_key("a")
    (b'p', b'sa')
    >>> encode_key(["a", 1])
    Traceback (most recent call last):
    ...
    TypeError: unhashable type: 'list'
    """
    if type(key) is str:
        return TEXT_TAG + key.encode()
    if type(key) is bytes:
        return BYTES_TAG + key
    hash(key)  # the grouping's buckets are a dict: only hashable keys work there
    return PICKLE_TAG + pickle.dumps(key, protocol=PICKLE_PROTOCOL)


def slot_of(key: bytes, slots: int) -> int:
    """The slot of an encoded key."""
    return zlib.crc32(key) % slots


def key_slot(key: Hashable, slots: int) -> int:
    """The slot a grouping key lives in, as the Spark runtime's key layouts place it."""
    return slot_of(encode_key(key), slots)
