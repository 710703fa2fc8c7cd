"""``python -m atomq`` runs the ``atomq`` command."""

from atomq.cli import main

main()
