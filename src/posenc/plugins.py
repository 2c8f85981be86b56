"""Plugins: encodings (and lab tasks) defined outside posenc, reachable from every command.

Three ways in, read by ``posenc`` and by ``python -m posenc.lab`` (each torchrun worker included):

- the entry-point groups ``posenc.encodings`` and ``posenc.tasks`` of installed packages
  (``[project.entry-points."posenc.encodings"] myenc = "mypackage.myenc:MyEncoding"``): an entry point
  naming a ``PositionalEncoding`` class (of ``posenc.tasks``: a lab ``Task`` or its class) registers it
  under the entry point's name; one naming a module imports it (the module registers what it defines);
  one naming a function calls it. Loaded once, on the first look-up of an encoding
  (``posenc.available()``, ``posenc.build``) or of a lab task;
- ``--plugin MODULE`` on any command (repeatable): the module is imported before the command line is
  read, so its encodings are valid names there;
- the environment variable ``POSENC_PLUGINS``: module names separated by commas, imported likewise
  (inherited by torchrun's workers).

A plugin that cannot be found is the user's mistake (one line, exit 2); an exception raised inside a
plugin's code is the plugin's bug: :func:`plugin_in_traceback` names the plugin, and the command shows
the traceback so that its author can find it.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from importlib import metadata
from pathlib import Path

#: Entry-point groups: encodings, and lab tasks.
ENCODING_GROUP = "posenc.encodings"
TASK_GROUP = "posenc.tasks"
GROUPS = (ENCODING_GROUP, TASK_GROUP)
#: The environment variable naming plugin modules, separated by commas.
ENVIRONMENT = "POSENC_PLUGINS"
#: The command-line option naming a plugin module (repeatable).
OPTION = "--plugin"

#: plugin name -> the files of its code (a module's file, or a package's folder)
_PLUGIN_FILES: dict[str, Path] = {}
_entry_points_loaded = False
_POSENC = Path(__file__).resolve().parent


class PluginError(Exception):
    """A plugin raised while it was loaded: the message names it; the cause is its own exception."""

    def __init__(self, plugin: str, error: BaseException) -> None:
        super().__init__(f"plugin {plugin!r} raised {type(error).__name__} while loading: {error}")
        self.plugin = plugin


def load_entry_points() -> None:
    """Load the installed packages' entry points of :data:`GROUPS`, once (later calls do nothing).

    Raises:
        PluginError: an entry point whose code raised (its traceback is the cause).
    """
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True  # first: an entry point that looks encodings up does not recurse
    for group in GROUPS:
        for entry_point in metadata.entry_points(group=group):
            _load_entry_point(group, entry_point)


def _load_entry_point(group: str, entry_point: metadata.EntryPoint) -> None:
    label = f"{entry_point.name} ({entry_point.value})"
    try:
        loaded = entry_point.load()
        _remember(entry_point.module, label)
        _install(group, entry_point.name, loaded)
    except Exception as error:
        raise PluginError(label, error) from error


def _install(group: str, name: str, loaded: object) -> None:
    """Register what an entry point named: a class under its name, a function by calling it, a module
    by having imported it."""
    from posenc.encodings import PositionalEncoding, register  # here: the registry looks plugins up
    from posenc.lab.tasks import is_task, register_task

    if group == ENCODING_GROUP and isinstance(loaded, type) and issubclass(loaded, PositionalEncoding):
        register(name, loaded)
    elif group == TASK_GROUP and is_task(loaded):
        register_task(name, loaded)
    elif callable(loaded) and not isinstance(loaded, type):
        loaded()
    elif not isinstance(loaded, type(sys)):
        raise TypeError(
            f"an entry point of {group} names a module, a function to call or (for encodings) a "
            f"PositionalEncoding class (for tasks, a Task or Task class), got {loaded!r}"
        )


def load_modules(names: list[str] | tuple[str, ...]) -> None:
    """Import each plugin module of ``names`` (it registers what it defines).

    Raises:
        ValueError: a module that cannot be found (the user's mistake: the message names it).
        PluginError: a module whose own code raised (its traceback is the cause).
    """
    for name in names:
        name = name.strip()
        if not name:
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and name.startswith(error.name):  # the plugin itself is missing
                raise ValueError(
                    f"plugin module {name!r} cannot be found (is it installed, or on PYTHONPATH?)"
                ) from None
            raise PluginError(name, error) from error
        except Exception as error:
            raise PluginError(name, error) from error
        _remember(name, name)


def modules_from_environment() -> list[str]:
    """The module names of :data:`ENVIRONMENT`, in order."""
    return [name.strip() for name in os.environ.get(ENVIRONMENT, "").split(",") if name.strip()]


def split_plugin_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(plugin modules, the rest of argv)``: every ``--plugin MODULE`` / ``--plugin=MODULE`` taken out
    of ``argv`` wherever it stands, so the command's own parser sees what it knows.

    Raises:
        ValueError: ``--plugin`` without a module name.
    """
    modules, rest = [], []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--":
            rest.extend(argv[index:])
            break
        if token == OPTION:
            if index + 1 >= len(argv) or argv[index + 1].startswith("-"):
                raise ValueError(f"{OPTION} needs a module name, e.g. {OPTION} mypackage.myenc")
            modules.append(argv[index + 1])
            index += 2
            continue
        if token.startswith(f"{OPTION}="):
            value = token.split("=", 1)[1]
            if not value:
                raise ValueError(f"{OPTION} needs a module name, e.g. {OPTION}=mypackage.myenc")
            modules.append(value)
        else:
            rest.append(token)
        index += 1
    return modules, rest


def load_for_command(argv: list[str]) -> list[str]:
    """What every command does first: load the entry points, ``POSENC_PLUGINS`` and the ``--plugin``
    modules of ``argv``; returns argv without the ``--plugin`` options.

    Raises:
        ValueError: a plugin module that cannot be found, ``--plugin`` without a name.
        PluginError: a plugin whose code raised while loading.
    """
    modules, rest = split_plugin_options(argv)
    load_entry_points()
    load_modules([*modules_from_environment(), *modules])
    return rest


def remember_class(cls: type) -> None:
    """Count the module that defines ``cls`` as plugin code (a class registered from outside posenc)."""
    module = sys.modules.get(cls.__module__)
    if module is not None and getattr(module, "__file__", None) is not None:
        if not Path(module.__file__).resolve().is_relative_to(_POSENC):
            _PLUGIN_FILES.setdefault(cls.__module__, Path(module.__file__).resolve())


def _remember(module_name: str, label: str) -> None:
    """Count a plugin's files as its code: its package's folder, or its module's file."""
    top = sys.modules.get(module_name.split(".")[0])
    module = sys.modules.get(module_name)
    source = getattr(top, "__file__", None) or getattr(module, "__file__", None)
    if source is None:
        return
    path = Path(source).resolve()
    if path.name == "__init__.py":
        path = path.parent
    if not path.is_relative_to(_POSENC):
        _PLUGIN_FILES[label] = path


def plugin_in_traceback(error: BaseException) -> str | None:
    """The plugin whose code raised ``error`` (the innermost frame of a plugin's files in its
    traceback, or of a class registered from outside posenc), or None when no plugin code is on it."""
    if isinstance(error, PluginError):
        return error.plugin
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        filename = Path(frame.filename).resolve()
        for plugin, path in _PLUGIN_FILES.items():
            if filename == path or filename.is_relative_to(path):
                return plugin
    return None


def print_plugin_failure(where: str, plugin: str, error: BaseException) -> None:
    """The traceback of ``error`` and a last line naming the plugin, on stderr."""
    traceback.print_exception(error, file=sys.stderr)
    print(f"{where}: error: the plugin {plugin} raised {type(error).__name__}: {error}", file=sys.stderr)


__all__ = [
    "ENCODING_GROUP",
    "ENVIRONMENT",
    "GROUPS",
    "OPTION",
    "PluginError",
    "TASK_GROUP",
    "load_entry_points",
    "load_for_command",
    "load_modules",
    "modules_from_environment",
    "plugin_in_traceback",
    "print_plugin_failure",
    "remember_class",
    "split_plugin_options",
]
