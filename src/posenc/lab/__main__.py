"""``python -m posenc.lab`` (and ``torchrun --nproc_per_node=N -m posenc.lab``): the ``posenc lab`` command.

Plugins load first, in every worker, as for ``posenc``: entry points, ``POSENC_PLUGINS`` and ``--plugin``.
"""

import argparse
import sys

from posenc._exits import failure
from posenc.lab.cli import configure, main

try:  # the parser imports torch: an interrupt then is one line too, as in main
    try:
        from posenc import plugins

        argv = plugins.load_for_command(sys.argv[1:])
    except Exception as error:  # a plugin not found is one line; a plugin's bug keeps its traceback
        sys.exit(failure("posenc lab", error))
    parser = argparse.ArgumentParser(prog="posenc lab", description="The length-generalisation lab.")
    configure(parser)
    arguments = parser.parse_args(argv)
except KeyboardInterrupt:
    print("posenc lab: interrupted", file=sys.stderr)
    sys.exit(130)
sys.exit(main(arguments))
