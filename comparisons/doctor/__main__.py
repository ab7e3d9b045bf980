"""`python -m comparisons.doctor TARGET ...`, the same as `python -m comparisons doctor TARGET ...`."""
import sys

from comparisons.doctor.cli import main

sys.exit(main())
