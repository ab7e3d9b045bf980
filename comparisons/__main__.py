"""`python -m comparisons demo | run | list | doctor`: the CLI, in comparisons/cli/."""
import sys

from comparisons.cli import main

if __name__ == "__main__":
    sys.exit(main())
