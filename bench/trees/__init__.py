"""``make bench-trees``: two source trees served side by side (``python -m bench.trees``)."""
