"""`python -m luminal.cli` runs the `luminal` command."""

from luminal.cli.main import main

main()
