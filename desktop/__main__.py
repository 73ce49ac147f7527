"""`python -m desktop`: open the explorer window."""

import sys

from desktop.cli.gui import main

sys.exit(main())
