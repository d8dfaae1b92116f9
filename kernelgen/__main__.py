"""``python -m kernelgen``: the same command line as the ``kernelgen`` console script."""
import sys

from .apps.cli import main

if __name__ == "__main__":
    sys.exit(main())
