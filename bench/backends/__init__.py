"""``make bench-backends``: the same load on each database backend (``python -m bench.backends``)."""
