"""``make bench-group-commit``: creates with and without group commit (``python -m bench.group_commit``)."""
