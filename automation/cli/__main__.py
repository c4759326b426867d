"""`python -m automation.cli`: the command, without the entry point's interpreter tuning."""

import sys

from automation.cli import main

sys.exit(main(restore_signals=False))
