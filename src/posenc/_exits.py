"""How a command ends when it cannot go on: sizes that do not fit in memory, a closed stdout.

Both :func:`posenc.cli.main` and :func:`posenc.lab.cli.main` (``python -m posenc.lab``) use these, so
that either way in ends the same: one line on stderr (or nothing, for a closed stdout) and a status.
"""

from __future__ import annotations

import os
import re
import sys

#: Exit status when stdout's reader has gone (``posenc … | head -1``): 128 + SIGPIPE, what a shell reports
#: for a program that the signal ended. Python ignores SIGPIPE, so we return it ourselves; not 1, which
#: ``posenc verify`` keeps for "the claim fails".
BROKEN_PIPE = 141

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
