"""``python -m posenc.lab`` (and ``torchrun --nproc_per_node=N -m posenc.lab``): the ``posenc lab`` command."""

import argparse
import sys

from posenc.lab.cli import configure, main

parser = argparse.ArgumentParser(prog="posenc lab", description="The length-generalisation lab.")
configure(parser)
sys.exit(main(parser.parse_args()))
