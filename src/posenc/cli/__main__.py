"""`python -m posenc.cli` runs the posenc command."""

import sys

from posenc.cli import main

sys.exit(main())
