"""The training configuration: one dataclass, its validation, and its config.json form."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pong_mp.optim import OPTIMIZERS


class ConfigError(ValueError):
    """A bad option value, or options that contradict the run being resumed."""


def default_workers() -> int:
    """The CPUs this process may run on (respects affinity masks and containers)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class TrainConfig:
    """Everything that defines a training run."""

    env: str = "ALE/Pong-v5"
    """Gymnasium env id."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra env constructor arguments (Python API only, e.g. FakePong's points_to_win)."""
    backend: str = "local"
    """Where episodes are played: local (process pool), serial (this process) or ray."""
    workers: int = field(default_factory=default_workers)
    """Worker processes (local) or actors (ray); defaults to the number of usable CPUs."""
    ray_address: str | None = None
    """Address of an existing Ray cluster; implies the ray backend."""
    batch_size: int = 10
    """Episodes per update."""
    batches: int | None = None
    """Total updates of the run, counted across resumes; None runs until interrupted."""
    seed: int = 0
    """Run seed: initial weights and every episode's seed derive from it."""
    run_dir: str = "runs/pong"
    """Directory of config.json, metrics.jsonl and checkpoint.npz."""
    optimizer: str = "rmsprop"
    """rmsprop (Karpathy's) or adam (beta1 0.9, beta2 0.999, eps 1e-8)."""
    lr: float = 1e-3
    """Learning rate. Karpathy's reference is 1e-4; 1e-3 learns real Pong much faster on
    the same budget (docs/learning.md)."""
    gamma: float = 0.99
    """Discount factor of the returns."""
    decay_rate: float = 0.99
    """RMSProp decay of the mean of squared gradients (unused by adam)."""
    hidden: int = 200
    """Hidden units of the policy."""
    checkpoint_every: int = 10
    """Write checkpoint.npz every this many updates (and always at the end)."""
    episode_timeout: float = 600.0
    """Seconds an episode may take before its worker is treated as hung and replaced."""
    target_reward: float | None = None
    """Stop, with the checkpoint saved, once the running reward reaches this (e.g. 18)."""
    tensorboard: bool = True
    """Write TensorBoard event files into the run directory (`tensorboard --logdir runs`)."""

    def validate(self) -> None:
        """Raise ConfigError, naming the option, for the first bad type or value."""
        check_types(dataclasses.asdict(self))
        for name in ("lr", "gamma", "decay_rate", "episode_timeout"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{_flag(name)} must be a finite number")
        checks = [
            (self.workers >= 1, "--workers must be >= 1"),
            (
                self.backend != "local" or self.workers <= max_local_workers(),
                f"--workers must be at most {max_local_workers()} on this machine (4 per CPU): "
                "each worker is a process of ~100 MB",
            ),
            (self.batch_size >= 1, "--batch-size must be >= 1"),
            (self.batches is None or self.batches >= 0, "--batches must be >= 0"),
            (self.lr > 0, "--lr must be > 0"),
            (0 < self.gamma <= 1, "--gamma must be in (0, 1]"),
            (0 <= self.decay_rate < 1, "--decay-rate must be in [0, 1)"),
            (1 <= self.hidden <= MAX_HIDDEN, f"--hidden must be between 1 and {MAX_HIDDEN}"),
            (self.checkpoint_every >= 1, "--checkpoint-every must be >= 1"),
            (self.episode_timeout > 0, "--episode-timeout must be > 0"),
            (self.seed >= 0, "--seed must be >= 0"),
            (self.backend in ("local", "serial", "ray"), "--backend must be local, serial or ray"),
            (
                self.optimizer in OPTIMIZERS,
                f"--optimizer must be one of {', '.join(OPTIMIZERS)}",
            ),
            (
                self.target_reward is None or math.isfinite(self.target_reward),
                "--target-reward must be a finite number",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    def to_json(self) -> str:
        """The config as a JSON object."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: object) -> TrainConfig:
        """A config from a dict such as config.json's, its types and values checked;
        unknown keys are an error."""
        if not isinstance(data, dict):
            raise ConfigError(f"a config is a JSON object, not {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
        check_types(data)
        config = cls(**data)
        config.validate()
        return config


def max_local_workers() -> int:
    """The most worker processes the local backend starts: 4 per usable CPU, at least 64.
    More only wait for a core, and each costs ~100 MB of memory."""
    return max(64, 4 * default_workers())


MAX_HIDDEN = 4096
"""The most hidden units: W1 is then 26 M weights, 210 MB in float64 per copy, and a
worker's fixed episode memory alone passes 600 MB."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_KINDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int": ("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": (
        "a number",
        lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    ),
    "dict[str, Any]": (
        "a JSON object",
        lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
    ),
}


def check_types(data: dict[str, Any]) -> None:
    """Raise ConfigError naming the first field of `data` (config.json's, or a dataclass's)
    whose value has the wrong type for TrainConfig; keys that are not fields are ignored.
    A float where a whole number belongs is refused, not rounded."""
    for f in dataclasses.fields(TrainConfig):
        if f.name not in data:
            continue
        value = data[f.name]
        kind = str(f.type)
        optional = kind.endswith(" | None")
        if optional and value is None:
            continue
        what, ok = _KINDS[kind.removesuffix(" | None")]
        if not ok(value):
            null = " or null" if optional else ""
            raise ConfigError(f"{f.name} must be {what}{null}, not {json.dumps(value)}")


ALGORITHM_FIELDS = (
    "env",
    "env_kwargs",
    "batch_size",
    "seed",
    "optimizer",
    "lr",
    "gamma",
    "decay_rate",
    "hidden",
)
"""Fields that decide the weights: a resumed run must keep them, or it is another run."""


PRESETS: dict[str, dict[str, Any]] = {
    "karpathy": {
        "optimizer": "rmsprop",
        "lr": 1e-4,
        "decay_rate": 0.99,
        "batch_size": 10,
        "hidden": 200,
        "gamma": 0.99,
    },
}
"""Named sets of algorithm options. `karpathy` is pg-pong exactly, whatever the defaults."""


def apply_preset(
    name: str | None, options: dict[str, Any], explicit: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """`options` with the preset's values, except for the options in `explicit`, which the
    user set and which win. No preset (None) returns `options` unchanged."""
    if name is None:
        return dict(options)
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    chosen = {key: value for key, value in PRESETS[name].items() if key not in explicit}
    return {**options, **chosen}


def merge_for_resume(stored: TrainConfig, given: dict[str, Any]) -> TrainConfig:
    """The config of a resumed run: `stored` with the options the user gave again.

    Options that only say how to run (workers, backend, batches, ...) may change; an
    algorithm option that differs from the stored run is a ConfigError.
    """
    for name in ALGORITHM_FIELDS:
        if name in given and given[name] != getattr(stored, name):
            flag = _flag(name)
            raise ConfigError(
                f"this run was trained with {flag} {getattr(stored, name)!r}, not "
                f"{given[name]!r}: omit {flag} to resume it, or start a new --run-dir"
            )
    return dataclasses.replace(stored, **given)


def read_config(path: Path) -> TrainConfig:
    """Load and check config.json; a ConfigError names the file and the problem."""
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a valid pong-mp config (not UTF-8 JSON: {exc})") from None
    try:
        return TrainConfig.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: not a valid pong-mp config ({exc})") from None
