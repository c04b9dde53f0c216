"""The peers' word counts: scripts the peers' own virtualenvs run, one per peer.

Each is run as ``python SCRIPT INPUT_DIR RESULT_FILE``: it counts the words of the ``*.txt``
files in ``INPUT_DIR`` and writes ``{"seconds", "counts", "version", "workers"}`` as JSON to
``RESULT_FILE``. ``seconds`` times the flow's run only (not the interpreter's start, the
imports, nor writing the result). They import nothing from flamestream.
"""
