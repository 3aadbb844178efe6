"""Correctness trials too long for the suite, each a package run as ``python -m trials.<job>``:
``faults`` (the environment failing under load), ``torture`` (kill -9 under concurrent writes)
and ``fuzz`` (schemathesis at volume and atheris). The suite runs a bounded round of each."""
