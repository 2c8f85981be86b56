"""How a command ends when it cannot go on: sizes that do not fit in memory, a closed stdout.

Both :func:`posenc.cli.main` and :func:`posenc.lab.cli.main` (``python -m posenc.lab``) use these, so
that either way in ends the same: one line on stderr (or nothing, for a closed stdout) and a status.
"""

from __future__ import annotations

import os
import re
import sys

from posenc._extras import MissingExtra
from posenc._memory import out_of_memory

#: Exit status when stdout's reader has gone (``posenc … | head -1``): 128 + SIGPIPE, what a shell reports
#: for a program that the signal ended. Python ignores SIGPIPE, so we return it ourselves; not 1, which
#: ``posenc verify`` keeps for "the claim fails".
BROKEN_PIPE = 141
#: Exit status when a plugin's own code raised: its traceback is shown, and the plugin named.
PLUGIN_FAILED = 1
#: Exit status of bad input (the message names the argument and value), of a missing extra (it names
#: what to install) and of sizes that do not fit.
BAD_INPUT = 2

_TRIED = re.compile(r"tried to allocate (\d+) bytes|tried to allocate ([\d.]+ [KMGT]iB)", re.IGNORECASE)


def memory_message(command: str, error: BaseException) -> str:
    """One line for an allocation that failed in ``command`` (``"posenc verify"``): the size torch
    reports, when it does; its own message can span many lines."""
    found = _TRIED.search(str(error))
    if found is None:
        size = ""
    elif found[1]:
        size = f" (an allocation of {int(found[1]) / 2**30:.1f} GiB failed)"
    else:
        size = f" (an allocation of {found[2]} failed)"
    return f"{command}: error: the sizes asked for do not fit in memory{size}; ask for smaller ones"


def stdout_closed() -> int:
    """After a BrokenPipeError on stdout: point stdout at the null device, so that the flush at exit
    does not fail again (and print "Exception ignored …"), as Python's documentation of SIGPIPE
    recommends; returns :data:`BROKEN_PIPE`."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stdout without a descriptor (tests, embedding)
        return BROKEN_PIPE
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)
    return BROKEN_PIPE


def failure(where: str, error: BaseException) -> int:
    """How a command that raised ``error`` ends: a bug in a plugin's code with its traceback, naming the
    plugin (status 1); bad input in one line (2, the message names the argument and value), and so a
    missing extra (the message names what to install); sizes that do not fit in memory in one line (2);
    anything else, a bug of posenc's, raised as it is."""
    from posenc import plugins

    plugin = plugins.plugin_in_traceback(error)
    if plugin is not None:
        plugins.print_plugin_failure(where, plugin, error)
        return PLUGIN_FAILED
    if isinstance(error, ValueError | TypeError | MissingExtra):
        print(f"{where}: error: {error}", file=sys.stderr)
        return BAD_INPUT
    if isinstance(error, MemoryError | RuntimeError) and out_of_memory(error):
        print(memory_message(where, error), file=sys.stderr)
        return BAD_INPUT
    raise error
