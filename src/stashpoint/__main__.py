"""`python -m stashpoint` runs the command line."""

from stashpoint.cli import main

main()
