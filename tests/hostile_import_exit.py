"""A user module that exits the process importing it."""

import sys

sys.exit(0)
