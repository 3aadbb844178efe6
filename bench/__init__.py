"""The benchmark and robustness jobs, one package each, run as ``python -m bench.<job>`` from the
repository root (bench/README.md lists them); ``bench.lib`` is what they share."""
