"""`python -m posenc` runs the posenc command."""

import sys

from posenc.cli import main

sys.exit(main())
