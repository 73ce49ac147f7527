"""`python -m desktop`: open the explorer window."""

import sys

from desktop.app import main

sys.exit(main())
