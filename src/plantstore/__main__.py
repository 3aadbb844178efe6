"""``python -m plantstore`` is the ``plantstore`` command."""

from .cli import main

main()
