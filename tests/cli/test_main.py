"""posenc.cli.main: the registry of commands, one-line refusals with status 2 (running out of memory
included), interrupts with 130, a closed stdout with 141."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.cli import BROKEN_PIPE, COMMANDS, main, parser


def test_every_registered_command_has_a_parser_of_its_name_and_a_run():
    subparsers = next(action for action in parser()._actions if action.dest == "command")
    assert list(subparsers.choices) == list(COMMANDS) == ["list", "verify", "plot", "report", "lab", "bench"]
    assert all(callable(module.run) and callable(module.configure) for module in COMMANDS.values())


def test_help_prints_and_returns_0_instead_of_exiting(capsys):
    assert main(["--help"]) == 0
    assert "COMMAND" in capsys.readouterr().out
    assert main(["bench", "rope", "--help"]) == 0
    assert "--no-compile" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        ([], ["posenc: error:", "COMMAND"]),
        (["lsit"], ["posenc: error:", "invalid choice: 'lsit'", "'list'"]),
        (["verify", "--no-such-option"], ["unrecognized arguments: --no-such-option"]),
        (["bench"], ["posenc bench: error:", "BENCH"]),
        (["plot"], ["posenc plot: error:", "name"]),
    ],
)
def test_a_malformed_command_line_is_one_line_on_stderr_and_status_2(cli, argv, fragments):
    run = cli(*argv)
    run.assert_refused(*fragments)
    assert "usage:" not in run.err


INTERRUPTIBLE = {
    "list": (["list"], "posenc.encodings", "available"),
    "verify": (["verify"], "posenc.analysis", "dot_by_distance"),
    "verify --all": (["verify", "--all"], "posenc.analysis", "properties_by_name"),
    "plot": (["plot", "alibi", "--out", "{tmp}"], "posenc.plots.gallery", "figures"),
    "report": (["report", "--out", "{tmp}"], "posenc.report", "build_report"),
    "bench": (["bench", "sinusoidal"], "posenc.bench.sinusoidal", "run"),
}


@pytest.mark.parametrize("name", INTERRUPTIBLE)
def test_an_interrupt_in_any_command_is_one_line_and_status_130(cli, monkeypatch, tmp_path, name):
    import importlib

    argv, module, attribute = INTERRUPTIBLE[name]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), attribute, interrupted)
    run = cli(*(part.format(tmp=tmp_path) for part in argv))
    run.assert_refused(f"posenc {argv[0]}: interrupted", code=130)


def test_an_interrupt_while_torch_loads_is_one_line_and_status_130(cli, monkeypatch):
    # Ctrl-C in the first seconds, while the commands' parsers import torch, used to print a traceback
    import posenc.cli

    def importing_torch(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.cli.COMMANDS["lab"], "configure", importing_torch)
    cli("lab", "run", "--preset", "smoke").assert_refused("posenc: interrupted", code=130)


def test_the_posenc_command_imports_torch_only_inside_its_error_handling():
    # so that the interrupt above is the only window at start-up: importing posenc.cli is quick
    code = "import sys, posenc.cli; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


CPU_ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
    "to allocate 799999999992 bytes. Error code 12 (Cannot allocate memory)"
)
#: What running out of memory raises: Python's allocator, torch's CPU allocator, torch's CUDA allocator.
OUT_OF_MEMORY = {
    "MemoryError": (MemoryError, (), None),
    "DefaultCPUAllocator": (RuntimeError, (CPU_ALLOCATOR,), "745.1 GiB"),
    "CUDA": (
        "torch.OutOfMemoryError",
        ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.19 GiB\nmore",),
        "20.00 GiB",
    ),
}
MEMORY_HUNGRY = {
    **INTERRUPTIBLE,
    "bench attention": (
        ["bench", "attention", "--seq-lens", "99999999", "--sweep", "none", "--no-memory"],
        "posenc.bench.attention",
        "run",
    ),
    "lab run": (
        [
            "lab",
            "run",
            "--db",
            "{tmp}/r.sqlite",
            "--task",
            "copy",
            "--train-length",
            "100000",
            "--no-progress",
        ],
        "posenc.lab.sweep",
        "run_sweep",
    ),
}


@pytest.mark.parametrize("failure", OUT_OF_MEMORY)
@pytest.mark.parametrize("name", MEMORY_HUNGRY)
def test_running_out_of_memory_in_any_command_is_one_line_naming_it_and_status_2(
    cli, monkeypatch, tmp_path, name, failure
):
    import importlib

    import torch

    argv, module, attribute = MEMORY_HUNGRY[name]
    kind, message, size = OUT_OF_MEMORY[failure]
    kind = torch.OutOfMemoryError if kind == "torch.OutOfMemoryError" else kind

    def out_of_memory(*args, **kwargs):
        raise kind(*message)

    monkeypatch.setattr(importlib.import_module(module), attribute, out_of_memory)
    run = cli(*(part.format(tmp=tmp_path) for part in argv))
    command = "posenc lab run" if name == "lab run" else f"posenc {argv[0]}"
    fragments = [f"{command}: error:", "the sizes asked for do not fit in memory"]
    run.assert_refused(*fragments, *([size] if size else []))


def test_a_runtime_error_that_is_not_running_out_of_memory_is_not_hidden(cli, monkeypatch):
    import posenc.encodings

    def broken(*args, **kwargs):
        raise RuntimeError("a defect, not the user's sizes")

    monkeypatch.setattr(posenc.encodings, "available", broken)
    with pytest.raises(RuntimeError, match="a defect"):
        cli("list")


class ClosedPipe(io.StringIO):
    """A stdout whose reader has gone (``posenc … | head -1`` once head has its line)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("argv", [["list"], ["verify"], ["verify", "--json"], ["lab", "presets"]])
def test_a_closed_stdout_ends_the_command_quietly_with_status_141(monkeypatch, capsys, argv):
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(argv) == BROKEN_PIPE == 141
    assert capsys.readouterr().err == ""


ROOT = Path(__file__).parents[2]


def documented_command_lines() -> list[str]:
    """Every ``posenc …`` (but the lab's, documented with the lab) in a shell block of the README and
    docs/BENCHMARKS.md, up to a comment, a redirection or the end of a shell command."""
    lines = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "BENCHMARKS.md"):
        for block in re.findall(r"```(?:sh|console)\n(.*?)```", doc.read_text(), re.DOTALL):
            block = re.sub(r"\\\n\s*", " ", block)  # a command continued on the next line is one line
            for line in block.splitlines():
                command = _shell_command_after(line, "posenc")
                if command is not None and not command.startswith("lab"):
                    lines.append(command)
    return lines


def _shell_command_after(line: str, word: str) -> str | None:
    """The arguments after ``word`` in a shell line, up to an unquoted comment, redirection, pipe or
    command separator (quotes kept as written); None when ``word`` is not a command there."""
    match = re.search(rf"\b{word} ", line)
    if match is None:
        return None
    quote, end = None, len(line)
    for index in range(match.end(), len(line)):
        char = line[index]
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "#>;|&":
            end = index
            break
    return line[match.end() : end].strip()


@pytest.mark.parametrize("line", documented_command_lines())
def test_every_documented_command_line_still_parses(line):
    args = parser().parse_args(shlex.split(line))
    assert args.command in COMMANDS


def test_the_documented_command_lines_were_found():
    lines = documented_command_lines()
    assert "bench sinusoidal --length 4096 --d-model 512 --rounds 15" in lines
    assert "bench attention --device cuda --json bench_attention_cuda.json" in lines
    assert len(lines) >= 10
