"""Inverted index: documents -> (word, doc id) postings -> each word's sorted doc ids.

The graph is ``documents`` (source, payloads ``(doc_id, text)``) -> ``postings`` (flat_map,
one ``(word, doc_id)`` per distinct word of the document, words sorted) -> ``index``
(map_reduce: the first document of a word starts its posting list, each later one is merged
in) -> ``index`` (sink). Every posting releases the word's updated posting list, so a word's
released lists grow one document at a time and its last one is final::

    python -m flamestream.examples.inverted_index
"""

from __future__ import annotations

from collections.abc import Iterable

from flamestream import Dataflow, Reduced, Released, map_reduce
from flamestream.examples.wordcount import split_words
from flamestream.testing import run_in_order

#: A document: its id and its text.
Document = tuple[int, str]
#: A posting: a word and the id of a document it occurs in.
Posting = tuple[str, int]

#: The built-in documents :func:`main` indexes.
DOCUMENTS: tuple[Document, ...] = (
    (1, "Rain on the hill becomes a stream, and the stream becomes a river."),
    (2, "A data stream carries records from the fronts to the sinks."),
    (3, "The river carries boats, and the boats carry grain to the sea."),
    (4, "Records that arrive out of order make the grouping replay."),
    (5, "A sink releases records once the min-time has passed them."),
    (6, "The sea takes every river, and the sink takes every record."),
)


def postings(document: Document) -> list[Posting]:
    """One ``(word, doc_id)`` posting per distinct word of ``document``, words sorted."""
    doc_id, text = document
    return [(word, doc_id) for word in sorted(set(split_words(text)))]


def posting_pair(posting: Posting) -> Posting:
    """The mapper: the word is the key, the doc id the value."""
    word, doc_id = posting
    return word, doc_id


def first_posting(doc_id: int) -> tuple[int, ...]:
    """A word's posting list after its first document."""
    return (doc_id,)


def add_posting(docs: tuple[int, ...], doc_id: int) -> tuple[int, ...]:
    """A word's posting list with ``doc_id`` merged in: sorted, no duplicates."""
    return tuple(sorted(set(docs) | {doc_id}))


def build_flow() -> Dataflow:
    """The inverted index graph: documents -> postings -> index (map_reduce) -> index."""
    flow = Dataflow("inverted_index")
    documents = flow.source("documents")
    pairs = flow.flat_map("postings", documents, postings)
    index = map_reduce(
        flow, "index", pairs, mapper=posting_pair, initial=first_posting, reducer=add_posting
    )
    flow.sink("index", index)
    return flow


def final_index(released: Iterable[Released]) -> dict[str, tuple[int, ...]]:
    """The last released posting list of every word."""
    index: dict[str, tuple[int, ...]] = {}
    for item in released:
        reduced: Reduced[str, tuple[int, ...]] = item.payload
        index[reduced.key] = reduced.value
    return index


def main() -> int:
    """Index the built-in documents in order and print every word's posting list."""
    result = run_in_order(build_flow(), list(DOCUMENTS))
    index = final_index(result.released())
    print(
        f"inverted index of {len(DOCUMENTS)} documents: {len(index)} words, "
        f"{result.stats.released} posting-list updates released"
    )
    width = max((len(word) for word in index), default=0)
    for word in sorted(index):
        print(f"  {word:<{width}}  {', '.join(str(doc) for doc in index[word])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
