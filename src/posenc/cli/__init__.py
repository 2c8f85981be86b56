"""The ``posenc`` command: list the encodings, verify their claims, draw them, report, run the lab, bench.

One module per command, each with ``configure(subparsers)`` (adds its parser, under the name it has
in :data:`COMMANDS`) and ``run(args) -> int``. :func:`main` turns a user's mistake into one line on
stderr and exit status 2 (sizes that do not fit in memory included), an interrupt into one line and
130, and a closed stdout (``posenc … | head -1``) into silence and 141; 1 is left to ``verify``'s
"the claim fails".

Importing this package does not import torch (``posenc/__init__.py`` loads its names on first use),
so torch loads inside :func:`main`'s error handling and an interrupt at start-up is one line too.
"""

from __future__ import annotations

import sys

from posenc import plugins
from posenc._exits import BROKEN_PIPE, PLUGIN_FAILED, failure, stdout_closed
from posenc.cli import bench, lab, listing, plot, report, verify
from posenc.cli.options import Parser, UsageError
from posenc.cli.verify import verify_sinusoidal  # noqa: F401  (its former place)
from posenc.plugins import ENVIRONMENT, OPTION

#: Command name -> its module.
COMMANDS = {
    "list": listing,
    "verify": verify,
    "plot": plot,
    "report": report,
    "lab": lab,
    "bench": bench,
}

#: Exit statuses: a refused command line or option value, and an interrupt (128 + SIGINT); a closed
#: stdout ends with :data:`~posenc._exits.BROKEN_PIPE` (141, 128 + SIGPIPE), a plugin's own bug with
#: :data:`~posenc._exits.PLUGIN_FAILED` (1).
USAGE_ERROR, INTERRUPTED = 2, 130

__all__ = [
    "BROKEN_PIPE",
    "COMMANDS",
    "INTERRUPTED",
    "PLUGIN_FAILED",
    "USAGE_ERROR",
    "failure",
    "main",
    "parser",
]


def parser() -> Parser:
    """The whole command line: ``posenc COMMAND …`` with one sub-parser per entry of :data:`COMMANDS`."""
    root = Parser(
        prog="posenc",
        description=__doc__.splitlines()[0],
        epilog=f"{OPTION} MODULE (anywhere, repeatable) and {ENVIRONMENT}=MODULE,… import plugin modules "
        "first, and installed packages' posenc.encodings entry points are loaded: their encodings are "
        "names every command takes.",
    )
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        module.configure(commands)
    return root


def main(argv: list[str] | None = None) -> int:
    """Run ``posenc`` with ``argv`` (default ``sys.argv[1:]``) in this process; the exit status."""
    where = "posenc"
    try:
        try:
            argv = plugins.load_for_command(sys.argv[1:] if argv is None else list(argv))
            args = parser().parse_args(argv)
        except SystemExit as done:  # --help and the like have printed what was asked
            return done.code if isinstance(done.code, int) else 0
        where = f"posenc {args.command}"
        code = COMMANDS[args.command].run(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
        return code
    except UsageError as error:  # the parser's message names the (sub)command already
        print(error, file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"{where}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # stdout's reader has gone: nothing to say, and no one to say it to
        return stdout_closed()
    except Exception as error:
        return failure(where, error)
