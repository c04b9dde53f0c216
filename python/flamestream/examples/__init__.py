"""Runnable example jobs on the reference runtime.

``python -m flamestream.examples.wordcount`` counts the words of a text admitted out of order
over several fronts and checks the result; ``python -m flamestream.examples.inverted_index``
builds a word -> documents index. Both modules expose ``build_flow()`` for reuse in tests.
"""
