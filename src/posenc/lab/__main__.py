"""``python -m posenc.lab`` (and ``torchrun --nproc_per_node=N -m posenc.lab``): the ``posenc lab`` command."""

import argparse
import sys

from posenc.lab.cli import configure, main

try:  # the parser imports torch: an interrupt then is one line too, as in main
    parser = argparse.ArgumentParser(prog="posenc lab", description="The length-generalisation lab.")
    configure(parser)
    arguments = parser.parse_args()
except KeyboardInterrupt:
    print("posenc lab: interrupted", file=sys.stderr)
    sys.exit(130)
sys.exit(main(arguments))
