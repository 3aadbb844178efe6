"""The benchmark jobs, one package each, run as ``python -m bench.<job>`` from the repository
root (bench/README.md lists them); ``bench.lib`` is what they share, ``bench/tests`` tests
the report they draw. The correctness trials are in ``trials/``."""
