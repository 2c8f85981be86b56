"""The report's records: a lab database read once into typed runs, grouped by preset and configuration.

Runs are aggregated over seeds only when everything else in their config is the same: a preset's
runs are split into configurations (:func:`configurations`), each named by the settings that set it
apart from the preset's defaults (``steps=2500``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from posenc.encodings import available, describe
from posenc.lab.extension_report import is_extension_preset
from posenc.lab.presets import OVERRIDE_PLACES, PRESETS, Overrides, run_config
from posenc.lab.records import Records
from posenc.lab.tasks import Task, registered, task_names


@dataclass(frozen=True, eq=False)
class Run:
    """One recorded run: the columns of its row, JSON decoded, and what the report reads of them."""

    config_hash: str  # the run's identity
    preset: str  # the preset it was planned under
    task: str  # task name
    encoding: str  # encoding name
    seed: int  # -1 for a pair not applicable
    status: str  # "done" or "not applicable"
    reason: str | None  # why, when not applicable
    config: dict  # the RunConfig as recorded
    metrics: dict  # "eval" per length, losses, parameters, relative position
    timings: dict  # seconds per step, …
    versions: dict  # python, torch, posenc, device
    corpus: dict | None  # the corpus fingerprint of a task that reads one
    recorded_at: str  # UTC, ISO 8601

    @classmethod
    def of(cls, row: dict) -> Run:
        """The run of a row as :meth:`Records.rows` gives it."""
        return cls(**row)

    @property
    def done(self) -> bool:
        return self.status == "done"

    @property
    def spec(self) -> Task | None:
        """The registered task of this run; None for a task not registered here (a plugin's, not loaded)."""
        return registered(self.task)

    @property
    def family(self) -> str | None:
        spec = self.spec
        return None if spec is None else spec.family

    @property
    def train_length(self) -> int:
        return self.config["train_length"]

    @property
    def model(self) -> dict:
        return self.config["model"]

    @property
    def seconds_per_step(self) -> float:
        return self.timings["seconds_per_step"]

    @property
    def verdict(self) -> str:
        """The relative-position shift test's verdict."""
        return self.metrics["relative_position"]["verdict"]

    @property
    def lengths(self) -> list[int]:
        """The evaluated lengths, ascending."""
        return sorted(int(length) for length in self.metrics["eval"])

    def at(self, length: int) -> dict | None:
        """The evaluation entry at ``length``, or None when it was not evaluated."""
        return self.metrics["eval"].get(str(length))

    def at_multiple(self, multiple: int) -> dict | None:
        """The evaluation entry at ``multiple``·L."""
        return self.at(self.train_length * multiple)


def configuration_label(settings: tuple[tuple[str, str], ...]) -> str:
    """``steps=2500, train_length=8``, or ``preset defaults``."""
    return ", ".join(f"{name}={value}" for name, value in settings) if settings else "preset defaults"


@dataclass(frozen=True, eq=False)
class Configuration:
    """A preset's finished runs whose configs differ only in task, encoding and seed."""

    preset: str  # the preset's name
    settings: tuple[tuple[str, str], ...]  # what sets it apart from the preset's defaults
    runs: list[Run]  # its finished runs, in the order recorded

    @property
    def label(self) -> str:
        return configuration_label(self.settings)

    @cached_property
    def _by_task(self) -> dict[str, dict[str, list[Run]]]:
        grouped: dict[str, dict[str, list[Run]]] = {}
        for run in self.runs:
            grouped.setdefault(run.task, {}).setdefault(run.encoding, []).append(run)
        return grouped

    def by_encoding(self, task: str) -> dict[str, list[Run]]:
        """The runs of ``task`` by encoding (empty when it has none here)."""
        return self._by_task.get(task, {})

    def tasks(self, family: str | None = None) -> list[str]:
        """The registered tasks with runs here (only ``family``'s, when given), in registry order."""
        return [
            name
            for name in task_names()
            if name in self._by_task and (family is None or registered(name).family == family)
        ]

    def of_family(self, family: str) -> list[Run]:
        """The runs of the tasks of ``family``."""
        return [run for run in self.runs if run.family == family]

    def unregistered(self) -> list[str]:
        """The tasks recorded here that this posenc does not know (a plugin's, not loaded)."""
        return sorted(task for task in self._by_task if registered(task) is None)

    @cached_property
    def encodings(self) -> list[str]:
        """The encodings with runs here: in the seed table's order, then the others by name."""
        return sorted({run.encoding for run in self.runs}, key=_encoding_order)


def _encoding_order(name: str) -> tuple[int, str]:
    row = describe(name).seed_row if name in available() else None
    return (row.order if row else 1 << 30, name)


@dataclass(frozen=True, eq=False)
class Recorded:
    """A lab database's runs, read once: by preset, each preset's in the order recorded."""

    presets: dict[str, list[Run]]  # preset -> its runs (finished and not applicable)

    @property
    def has_done(self) -> bool:
        return any(run.done for runs in self.presets.values() for run in runs)

    def is_extension(self, preset: str) -> bool:
        """Whether the preset's runs are a context-extension study."""
        return is_extension_preset(self.presets[preset])

    @cached_property
    def configurations(self) -> list[Configuration]:
        """The configurations of every preset that is not a context-extension study."""
        return [
            configuration
            for name, runs in self.presets.items()
            if not self.is_extension(name)
            for configuration in configurations(runs)
        ]

    def busiest(self, count: Callable[[Configuration], int]) -> Configuration | None:
        """The configuration with the largest ``count`` (the first recorded among equals); None when
        every configuration counts 0."""
        counted = [(count(configuration), configuration) for configuration in self.configurations]
        counted = [pair for pair in counted if pair[0]]
        return max(counted, key=lambda pair: pair[0])[1] if counted else None


def load(db_path: str | Path, preset: str | None = None) -> Recorded:
    """The runs of the database (only ``preset``'s, when given); none when it is missing or empty.

    Raises:
        ValueError: a damaged record, named (before anything is drawn).
    """
    path = Path(db_path)
    if not path.is_file():
        return Recorded({})
    try:
        with Records(path, readonly=True) as records:
            rows = records.report_rows()  # a damaged record: one message naming it, not a KeyError
    except ValueError as error:
        if "holds no lab records" in str(error):
            return Recorded({})
        raise
    grouped: dict[str, list[Run]] = {}
    for row in rows:
        if preset is None or row["preset"] == preset:
            grouped.setdefault(row["preset"], []).append(Run.of(row))
    return Recorded(grouped)


def recorded(source: str | Path | Recorded, preset: str | None = None) -> Recorded:
    """``source`` when it is already loaded, else the database it names, loaded."""
    return source if isinstance(source, Recorded) else load(source, preset)


#: Settings ``posenc lab run`` can change from a preset's: (name shown, place in the flattened config).
OVERRIDES = tuple(OVERRIDE_PLACES.items())
_ABSENT = "absent"


def _flatten(config: dict, prefix: str = "") -> dict[str, object]:
    """``{"train": {"steps": 12}}`` -> ``{"train.steps": 12}``."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _show(value: object) -> str:
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def _planned(run: Run, overrides: Overrides) -> dict:
    """The flattened config this version plans for the run's preset, task, encoding and seed."""
    planned = run_config(
        PRESETS[run.preset],
        run.task,
        run.encoding,
        run.seed,
        corpus_sha256=run.config.get("corpus_sha256"),
        overrides=overrides,
    )
    return _flatten(json.loads(planned.canonical_json()))


def differences(run: Run) -> tuple[tuple[str, str], ...]:
    """What sets a finished run apart from its preset's defaults, its seed aside: ``((setting, value), …)``.

    The settings given to ``posenc lab run`` (``steps``, ``train_length``, …) that differ from the
    preset's, then every other entry of the recorded config that this version would plan otherwise
    (an older config version, a preset changed since), by its dotted place in the config. Two runs of
    the same preset, task, encoding and corpus have the same differences exactly when their configs
    are equal but for the seed.
    """
    flat = _flatten(run.config)
    try:  # as planned with the run's own overridable settings
        planned = _planned(run, Overrides.of_config(run.config))
    except (KeyError, TypeError, ValueError):  # a preset, task or encoding this version does not know
        rest = json.dumps({k: v for k, v in flat.items() if k != "seed"}, sort_keys=True)
        return (
            ("config", f"{hashlib.sha256(rest.encode()).hexdigest()[:12]} (not planned by this version)"),
        )
    # the overridable settings as the preset sets them for the run's task (evaluation lengths at its L)
    defaults = _planned(run, Overrides(train_length=run.train_length))
    items = [
        (name, _show(flat.get(place))) for name, place in OVERRIDES if flat.get(place) != defaults.get(place)
    ]
    for place in sorted((flat.keys() | planned.keys()) - {"seed"}):
        if flat.get(place, _ABSENT) != planned.get(place, _ABSENT):
            items.append((place, _show(flat.get(place, _ABSENT))))
    return tuple(items)


def configurations(runs: list[Run]) -> list[Configuration]:
    """A preset's finished runs grouped by configuration, in the order first recorded.

    A configuration is everything in a run's config but the seed (and the task and encoding, which
    are the tables' rows and columns), named by its :func:`differences`; runs on a corpus other than
    the one most of them used also name it. Only runs of one configuration are aggregated over seeds.
    """
    done = [run for run in runs if run.done]
    corpora = Counter(run.config.get("corpus_sha256") for run in done if run.config.get("corpus_sha256"))
    usual = corpora.most_common(1)[0][0] if corpora else None
    groups: dict[tuple, list[Run]] = {}
    for run in done:
        key = differences(run)
        corpus = run.config.get("corpus_sha256")
        if corpus and corpus != usual:
            key += (("corpus", f"{corpus[:16]}…"),)
        groups.setdefault(key, []).append(run)
    preset = done[0].preset if done else ""
    return [Configuration(preset, settings, group) for settings, group in groups.items()]
