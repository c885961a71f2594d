"""The training configuration: one dataclass, its validation, and its config.json form."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from pong_mp.backends import BACKENDS
from pong_mp.files import read_file
from pong_mp.optim import OPTIMIZERS
from pong_mp.policy import NetShape


class ConfigError(ValueError):
    """A bad option value, or options that contradict the run being resumed."""


def default_workers() -> int:
    """The CPUs this process may run on (respects affinity masks and containers)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


ALGOS = ("pg", "ppo")
"""Learners: Karpathy's policy gradient, or an actor-critic with PPO's clipped surrogate."""

POLICIES = ("mlp", "conv")
"""Policy networks: a hidden layer on the pixels (Karpathy's), or on a conv layer's features."""


OPTION_GROUPS = ("run", "learner", "policy", "schedule", "cluster")
"""The groups of `pong-mp train`'s options in its help; within each, TrainConfig's order."""


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    group: str,
    factory: Callable[[], Any] | None = None,
    **cli: Any,
) -> Any:
    """A TrainConfig field and its `pong-mp train` option: help, `group` and click settings
    in `cli`; `factory` makes the default anew for each config."""
    metadata = {"help": help, "group": group, **cli}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    """Everything that defines a training run: each field is a `pong-mp train` option (with
    dashes) and a keyword of `pong_mp.train`."""

    run_dir: str = option(
        "runs/pong", "Where config.json, metrics.jsonl and checkpoint.npz live.", group="run"
    )
    seed: int = option(
        0, "Run seed: initial weights and every episode's seed derive from it.", group="run"
    )
    batches: int | None = option(
        None, "Total updates of the run, across resumes (default: until Ctrl-C).", group="run"
    )
    target_reward: float | None = option(
        None,
        "Stop, with the checkpoint saved, once the running reward reaches R (18: solved).",
        metavar="R",
        group="run",
    )
    fork_from: str | None = option(
        None,
        "Start this new run from the last checkpoint of the run in RUN: its weights, optimizer "
        "state, counters and metrics so far, and its algorithm options except those given "
        "here (e.g. --lr). The run in RUN is only read.",
        metavar="RUN",
        group="run",
    )
    env: str = option(
        "ALE/Pong-v5",
        "Env to train on: ALE/Pong-v5 (any ALE/Pong version) or FakePong-v0; or your own Pong "
        "named with its module, package.module:Name-v0 (its frames' shape and its actions are "
        "checked).",
        group="run",
    )
    env_kwargs: dict[str, Any] = option(
        factory=dict,
        help="Extra env constructor argument, VALUE as JSON (e.g. points_to_win=5); repeatable.",
        flag="--env-arg",
        metavar="KEY=VALUE",
        group="run",
    )
    checkpoint_every: int = option(
        10, "Write checkpoint.npz every N updates (and at the end).", group="run"
    )
    episode_timeout: float = option(
        600.0, "Seconds before a worker stuck in one episode is replaced.", group="run"
    )
    tensorboard: bool = option(
        True, "Write TensorBoard event files into the run directory.", group="run"
    )
    algo: str = option(
        "ppo",
        "ppo: an actor-critic (a value head on the hidden layer, GAE advantages, the clipped "
        "surrogate, several passes over each batch); pg: Karpathy's policy gradient, one step "
        "per batch.",
        choices=ALGOS,
        group="learner",
    )
    lr: float = option(1e-3, "Learning rate (Karpathy's reference: 1e-4).", group="learner")
    optimizer: str = option(
        "adam", "adam, or rmsprop (Karpathy's).", choices=OPTIMIZERS, group="learner"
    )
    batch_size: int = option(10, "Episodes per update.", group="learner")
    epochs: int = option(4, "ppo: passes over each batch.", group="learner")
    minibatches: int = option(
        16, "ppo: optimizer steps per pass (each episode's steps dealt out).", group="learner"
    )
    decay_rate: float = option(
        0.99, "RMSProp's decay of the mean of squared gradients.", group="learner"
    )
    policy_lag: int = option(
        0,
        "Play update k's episodes with the weights of update k-1-L, so that L+1 batches "
        "can be in flight and no worker waits at a batch's end (0: synchronous).",
        metavar="L",
        group="learner",
    )
    policy: str = option(
        "conv",
        "conv: the hidden layer sees the features of a convolutional layer (8x8 filters, "
        "stride 4, on the sparse input; --algo ppo); mlp: it sees the pixels (Karpathy's).",
        choices=POLICIES,
        group="policy",
    )
    hidden: int = option(200, "Hidden units.", group="policy")
    channels: int = option(16, "conv: filters of the convolutional layer.", group="policy")
    entropy_bonus: float = option(
        0.01,
        "Add BETA times the policy's entropy at every step to the objective, which keeps the "
        "policy from settling early (0: none, Karpathy's); below 0, a penalty that makes it "
        "commit to its likelier actions. --entropy-drop-at replaces it from its points on.",
        metavar="BETA",
        group="schedule",
    )
    entropy_drop_at: tuple[float, ...] = option(
        (4e6, 6.3e6, 1e7),
        "From STEPS env steps on, weigh the entropy by --entropy-drop-to instead of "
        "--entropy-bonus (0: never; --algo ppo); several points, comma-separated and "
        "increasing, each takes its own --entropy-drop-to value. The default commits the "
        "policy to its likelier actions once it wins, lets it settle, then commits it harder.",
        metavar="STEPS[,STEPS...]",
        group="schedule",
    )
    entropy_drop_to: tuple[float, ...] = option(
        (-0.03, 0.0, -0.1),
        "The entropy bonus from --entropy-drop-at on (below 0: a penalty): one value per "
        "point, comma-separated.",
        metavar="BETA[,BETA...]",
        group="schedule",
    )
    lr_drop_at: tuple[float, ...] = option(
        (8e6,),
        "From STEPS env steps on, train at --lr-drop-to instead of --lr (0: never); several "
        "points, comma-separated and increasing, each takes its own --lr-drop-to value (a "
        "lower rate late lifts the level a run settles at).",
        metavar="STEPS[,STEPS...]",
        group="schedule",
    )
    lr_drop_to: tuple[float, ...] = option(
        (3e-4,),
        "The learning rate from --lr-drop-at on: one value per point, comma-separated.",
        metavar="LR[,LR...]",
        group="schedule",
    )
    workers: int = option(
        factory=default_workers,
        help="Worker processes: on this machine (local), or over the Ray cluster's nodes (ray).",
        show_default="number of CPUs",
        group="cluster",
    )
    backend: str = option(
        "local", "local: process pool; serial: this process; ray: a Ray cluster.", choices=BACKENDS,
        group="cluster",
    )
    ray_address: str | None = option(
        None, "Join this Ray cluster (implies --backend ray).", metavar="HOST:PORT", group="cluster"
    )

    def __post_init__(self) -> None:
        # A drop as tuples, given as one number (older configs, keywords) or a list.
        for name, value in drop_options(vars(self)).items():
            setattr(self, name, value)

    @property
    def value_head(self) -> bool:
        """Whether the weights carry a value head (the actor-critic's)."""
        return self.algo == "ppo"

    @property
    def conv_channels(self) -> int:
        """The convolutional layer's channels: --channels with --policy conv, else 0."""
        return self.channels if self.policy == "conv" else 0

    @property
    def shape(self) -> NetShape:
        """The policy network's shape: --hidden units on the conv layer or the pixels."""
        return NetShape(self.hidden, self.conv_channels)

    def validate(self) -> None:
        """Raise ConfigError, naming the option, for the first bad type or value."""
        # config.json is 2 levels above the values: as read back, it may nest no deeper
        if _deeper_than(self.env_kwargs, MAX_JSON_DEPTH - 1):
            raise ConfigError(f"--env-arg values nest more than {MAX_JSON_DEPTH - 2} levels deep")
        check_types(dataclasses.asdict(self))
        for name in ("lr", "decay_rate", "entropy_bonus", "episode_timeout"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{option_flag(name)} must be a finite number")
        for at, to in DROPS.values():
            for name in (at, to):
                if not all(math.isfinite(v) for v in getattr(self, name)):
                    raise ConfigError(f"{option_flag(name)} must be a finite number")
            points, values = getattr(self, at), getattr(self, to)
            if any(v <= 0 for v in points) or list(points) != sorted(set(points)):
                raise ConfigError(
                    f"{option_flag(at)} must be env steps > 0 in increasing order (0 alone: never)"
                )
            if points and len(values) != len(points):
                # Either may be the default, which the user never typed: show both.
                raise ConfigError(
                    f"{option_flag(to)} needs one value for each {option_flag(at)} point: "
                    f"{len(points)} point{'s' * (len(points) != 1)} ({shown(points)}), "
                    f"{len(values)} value{'s' * (len(values) != 1)} ({shown(values)}); "
                    "give both"
                )
        local_workers = max(64, 4 * default_workers())  # each worker costs ~100 MB
        checks = [
            (self.run_dir.strip() != "", NO_RUN_DIR),
            (self.fork_from is None or self.fork_from.strip() != "", NO_FORK_FROM),
            (
                _strict_json(self.env_kwargs),
                "--env-arg values must be JSON (numbers finite: no NaN or Infinity)",
            ),
            (
                self.ray_address is None or _host_port(self.ray_address),
                "--ray-address must be HOST:PORT, the head node's address that `ray start "
                "--head` printed (e.g. 10.0.0.5:6379)",
            ),
            (self.workers >= 1, "--workers must be >= 1"),
            (
                self.backend != "local" or self.workers <= local_workers,
                f"--workers must be at most {local_workers} on this machine (4 per CPU): "
                "each worker is a process of ~100 MB",
            ),
            (self.batch_size >= 1, "--batch-size must be >= 1"),
            (
                self.batch_size <= MAX_BATCH_SIZE,
                f"--batch-size must be at most {MAX_BATCH_SIZE:,} episodes (one update of "
                "more would show no progress for hours)",
            ),
            (self.batches is None or self.batches >= 0, "--batches must be >= 0"),
            (self.lr > 0, "--lr must be > 0"),
            (
                self.lr <= MAX_LR,
                f"--lr must be at most {MAX_LR:g} (larger steps overflow the weights; the "
                "default is 1e-3, Karpathy's 1e-4)",
            ),
            (
                all(0 < v <= MAX_LR for v in self.lr_drop_to),
                f"--lr-drop-to must be > 0 and at most {MAX_LR:g}",
            ),
            (0 <= self.decay_rate < 1, "--decay-rate must be in [0, 1)"),
            (
                abs(self.entropy_bonus) <= MAX_ENTROPY_BONUS,
                f"--entropy-bonus must be between -{MAX_ENTROPY_BONUS:g} and "
                f"{MAX_ENTROPY_BONUS:g} (0.01 to 0.03 are the bonuses tried, -0.1 and -0.3 "
                "the penalties)",
            ),
            (
                all(abs(v) <= MAX_ENTROPY_BONUS for v in self.entropy_drop_to),
                f"--entropy-drop-to must be between -{MAX_ENTROPY_BONUS:g} and "
                f"{MAX_ENTROPY_BONUS:g}",
            ),
            (self.algo in ALGOS, f"--algo must be one of {', '.join(ALGOS)}"),
            (self.algo == "pg" or self.policy_lag == 0, "--algo ppo works with --policy-lag 0"),
            (1 <= self.epochs <= 100, "--epochs must be between 1 and 100"),
            (1 <= self.minibatches <= 1000, "--minibatches must be between 1 and 1000"),
            (1 <= self.hidden <= MAX_HIDDEN, f"--hidden must be between 1 and {MAX_HIDDEN}"),
            (self.policy in POLICIES, f"--policy must be one of {', '.join(POLICIES)}"),
            (
                self.policy == "mlp" or self.algo == "ppo",
                "--policy conv works with --algo ppo; --algo pg takes --policy mlp and "
                "--entropy-drop-at 0 (as --preset pg and --preset karpathy set them)",
            ),
            (
                not self.entropy_drop_at or self.algo == "ppo",
                f"--entropy-drop-at {shown(self.entropy_drop_at)} works with --algo ppo only "
                "(Karpathy's learner weighs the entropy by --entropy-bonus throughout): give "
                "--entropy-drop-at 0, as --preset pg does",
            ),
            (
                1 <= self.channels <= MAX_CHANNELS,
                f"--channels must be between 1 and {MAX_CHANNELS}",
            ),
            (
                0 <= self.policy_lag <= MAX_POLICY_LAG,
                f"--policy-lag must be between 0 and {MAX_POLICY_LAG}",
            ),
            (self.checkpoint_every >= 1, "--checkpoint-every must be >= 1"),
            (
                self.episode_timeout >= MIN_EPISODE_TIMEOUT,
                f"--episode-timeout must be at least {MIN_EPISODE_TIMEOUT:g} s (shorter "
                "would judge every episode hung)",
            ),
            (self.seed >= 0, "--seed must be >= 0"),
            (self.backend in BACKENDS, f"--backend must be one of {', '.join(BACKENDS)}"),
            (self.optimizer in OPTIMIZERS, f"--optimizer must be one of {', '.join(OPTIMIZERS)}"),
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
        """A checked config from a dict such as config.json's; missing options take
        OLDER_RUN_DEFAULTS, unknown keys are an error."""
        if not isinstance(data, dict):
            raise ConfigError(f"a config is a JSON object, not {type(data).__name__}")
        data = {k: v for k, v in without_removed(data).items() if k not in RECORD_KEYS}
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
        config = cls(**{**OLDER_RUN_DEFAULTS, **data})
        config.validate()
        return config


# An empty path's refusals: as a Path, it is the current directory, which no one means (a
# variable left unset). Said by the options' checks, and by the run directory's before them.
NO_RUN_DIR = "--run-dir must name a directory"
NO_FORK_FROM = "--fork-from must name a run directory"

MAX_BATCH_SIZE = 10_000
"""The most episodes in one update: 10,000 of real Pong take hours with no progress shown."""

MIN_EPISODE_TIMEOUT = 1.0
"""The shortest --episode-timeout: a worker's answer may take a poll of up to 1 s."""

MAX_LR = 1.0
"""The largest learning rate: weights are about 0.01, and far larger steps overflow them."""

MAX_ENTROPY_BONUS = 10.0
"""The largest entropy bonus (or penalty): the standardised returns are about 1."""

MAX_POLICY_LAG = 8
"""The most lag: each step keeps one more weights version in memory, checkpoint and nodes."""

OLDER_RUN_DEFAULTS: dict[str, Any] = {
    "optimizer": "rmsprop",
    "policy_lag": 0,
    "lr_drop_at": 0.0,
    "lr_drop_to": 3e-4,
    "entropy_bonus": 0.0,
    "entropy_drop_at": 0.0,
    "entropy_drop_to": -0.1,
    "algo": "pg",
    "epochs": 4,
    "minibatches": 4,
    "policy": "mlp",
    "channels": 16,
}
"""Options added after runs were first stored, with the value a config without them was
trained with: a resumed run keeps its algorithm, an older model plays as it was trained."""


def stored_option(config: dict[str, Any], name: str) -> Any:
    """Option `name` of a stored config, or its OLDER_RUN_DEFAULTS value if it has none."""
    return config.get(name, OLDER_RUN_DEFAULTS[name])


def stored_value_head(config: dict[str, Any]) -> bool:
    """Whether a stored config's weights carry a value head (TrainConfig.value_head)."""
    return stored_option(config, "algo") == "ppo"


def stored_conv_channels(config: dict[str, Any]) -> int:
    """A stored config's conv channels, 0 for the MLP (TrainConfig.conv_channels)."""
    return stored_option(config, "channels") if stored_option(config, "policy") == "conv" else 0


REMOVED: dict[str, tuple[Any, str]] = {
    "conv_layers": (1, "582c055"),
    "noop_margin": (0.0, "582c055"),
    "inputs": ("diff", "582c055"),
    "lr_half_life": (0.0, "582c055"),
    "advantage": ("episode", "582c055"),
    "clip": (0.1, "582c055"),
    "gae_lambda": (0.95, "582c055"),
    "value_coef": (0.5, "582c055"),
    "max_grad_norm": (0.5, "582c055"),
    "gamma": (0.99, "582c055"),
    "baseline": ("none", "582c055"),
}
"""Options pong-mp no longer has: the value each now always has (a stored config may give
it), and the last commit whose code had it (a stored config of another value needs it)."""


RECORD_KEYS = ("commit",)
"""config.json's keys beside the options: `commit`, of the code that last started the run."""


class RemovedOptionError(ConfigError):
    """A stored run was made with another value of an option pong-mp no longer has."""


def removed_values(config: dict[str, Any]) -> dict[str, Any]:
    """A stored config's REMOVED options of another value than the one they now have."""
    return {
        name: config[name]
        for name, (kept, _) in REMOVED.items()
        if name in config and config[name] != kept
    }


def without_removed(config: dict[str, Any]) -> dict[str, Any]:
    """A stored config without REMOVED options; RemovedOptionError for one of another value."""
    for name, value in removed_values(config).items():
        commit = REMOVED[name][1]
        raise RemovedOptionError(
            f"this run was made with {option_flag(name)} {shown(value)}, which pong-mp no "
            f"longer has: the code of commit {commit} runs it (git checkout {commit})"
        )
    return {name: value for name, value in config.items() if name not in REMOVED}


MAX_CHANNELS = 64
"""The most conv filters: the hidden layer then has 23,104 inputs, 3.6 times the MLP's."""

MAX_HIDDEN = 4096
"""The most hidden units: W1 is then 210 MB in float64, a worker's episode memory 600 MB."""


DROPS: dict[str, tuple[str, str]] = {
    "lr": ("lr_drop_at", "lr_drop_to"),
    "entropy_bonus": ("entropy_drop_at", "entropy_drop_to"),
}
"""Each option a drop replaces: the drop's points (env steps) and its values there."""


def _is_number(value: object) -> bool:
    # A float, or a whole number a float holds (JSON's integers have no bound).
    return not isinstance(value, bool) and (
        isinstance(value, float) or (isinstance(value, int) and abs(value) < 2**1024)
    )


def drop_options(data: dict[str, Any]) -> dict[str, tuple[float, ...]]:
    """The drop options in `data` as tuples of floats, from one number (a point of 0: no
    drop) or a list; values of another type are left out, for check_types to name."""
    out: dict[str, tuple[float, ...]] = {}
    for at, to in DROPS.values():
        for name in (at, to):
            value = data.get(name)
            if _is_number(value):
                value = (value,)
            if isinstance(value, list | tuple) and all(_is_number(v) for v in value):
                numbers = tuple(float(v) for v in value)
                out[name] = () if name == at and numbers == (0.0,) else numbers
    return out


def idle_drop_values(options: dict[str, Any]) -> tuple[str, ...]:
    """The drop values in `options` that decide nothing: those of a drop with no points."""
    return tuple(to for at, to in DROPS.values() if not options.get(at))


def shown(value: object) -> str:
    """An option's value in a message: a drop's as typed (4e6,6.3e6; none: 0), else repr."""
    if isinstance(value, tuple):
        return ",".join(map(_typed, value)) or "0"
    return repr(value)


def _typed(number: float) -> str:
    # The short form a user types (4e6, not 4e+06), where it is exact.
    short = re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", f"{number:g}")
    return short if float(short) == number else repr(number)


def option_flag(name: str) -> str:
    """The command-line flag of TrainConfig field `name` (lr_drop_at: --lr-drop-at;
    env_kwargs: --env-arg)."""
    flags = {f.name: f.metadata.get("flag") for f in dataclasses.fields(TrainConfig)}
    return flags.get(name) or "--" + name.replace("_", "-")


_KINDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int": ("a whole number", lambda v: _is_number(v) and isinstance(v, int)),
    "float": ("a number", _is_number),
    "tuple[float, ...]": (
        "a number or a list of numbers",
        lambda v: _is_number(v) or (isinstance(v, list | tuple) and all(map(_is_number, v))),
    ),
    "dict[str, Any]": (
        "a JSON object",
        lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
    ),
}


def _shown_json(value: object) -> str:
    # As config.json would hold it; a value it could not hold (bytes, a set) as Python's.
    if isinstance(value, int) and value.bit_length() > 10_000:  # str() refuses 4,300 digits
        return f"a number of {value.bit_length():,} bits, past 2**1024"
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _host_port(address: str) -> bool:
    host, _, port = address.rpartition(":")
    return host.strip() != "" and port.isascii() and port.isdigit() and 0 < int(port) < 65536


def check_types(data: dict[str, Any]) -> None:
    """Raise ConfigError naming the first TrainConfig field in `data` of the wrong type (a
    float where a whole number belongs included); other keys are ignored."""
    for f in (f for f in dataclasses.fields(TrainConfig) if f.name in data):
        value = data[f.name]
        kind = str(f.type)
        optional = kind.endswith(" | None")
        if optional and value is None:
            continue
        what, ok = _KINDS[kind.removesuffix(" | None")]
        if not ok(value):
            null = " or null" if optional else ""
            raise ConfigError(f"{f.name} must be {what}{null}, not {_shown_json(value)}")


ALGORITHM_FIELDS = (
    "env", "env_kwargs", "batch_size", "seed", "optimizer", "lr", "lr_drop_at", "lr_drop_to",
    "decay_rate", "hidden", "policy", "channels", "entropy_bonus", "entropy_drop_at",
    "entropy_drop_to", "policy_lag", "algo", "epochs", "minibatches", "fork_from",
)  # fmt: skip
"""Fields that decide the weights: a resumed run must keep them, or it is another run."""

FORK_KEEPS = ("env", "optimizer", "policy", "channels")
"""Options a fork keeps from its run, whose checkpoint fits only these; the rest it may change
(state.with_hidden, with_value_head, with_policy_lag, with_new_optimizer_state)."""


_KARPATHY: dict[str, Any] = {
    "algo": "pg",
    "policy": "mlp",
    "optimizer": "rmsprop",
    "lr": 1e-4,
    "lr_drop_at": (),
    "decay_rate": 0.99,
    "batch_size": 10,
    "hidden": 200,
    "entropy_bonus": 0.0,
    "entropy_drop_at": (),
    "policy_lag": 0,
}

PRESETS: dict[str, dict[str, Any]] = {
    "karpathy": _KARPATHY,
    "pg": {**_KARPATHY, "lr": 1e-3},
    "ppo": {
        **_KARPATHY,
        "algo": "ppo",
        "optimizer": "adam",
        "lr": 1e-3,
        "entropy_bonus": 0.01,
        "epochs": 4,
        "minibatches": 4,
    },
    "batch16": {
        **_KARPATHY,
        "algo": "ppo",
        "policy": "conv",
        "channels": 16,
        "optimizer": "adam",
        "lr": 1.3e-3,
        "lr_drop_at": (8e6,),
        "lr_drop_to": (3e-4,),
        "entropy_bonus": 0.01,
        "entropy_drop_at": (4e6, 6.3e6, 1e7),
        "entropy_drop_to": (-0.03, 0.0, -0.1),
        "batch_size": 16,
        "epochs": 3,
        "minibatches": 26,
    },
}
"""Named sets of algorithm options, exact whatever the defaults: `karpathy` is pg-pong, `pg`
it at lr 1e-3, `ppo` the actor-critic on the MLP (docs/learning-notes.md has the evidence),
`batch16` the actor-critic on the conv policy with an episode for each of 16 workers
(docs/options.md, "Many workers")."""


def apply_preset(
    name: str | None, options: dict[str, Any], explicit: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """`options` with preset `name`'s values (None: none), except those in `explicit`."""
    if name is None:
        return dict(options)
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    chosen = {key: value for key, value in PRESETS[name].items() if key not in explicit}
    return {**options, **chosen}


def merge_for_resume(stored: TrainConfig, given: dict[str, Any]) -> TrainConfig:
    """`stored` with the options given on resume; ConfigError for a changed algorithm one."""
    if _same_directory(given.get("fork_from"), stored.fork_from):  # ./runs/a/ is runs/a
        given = {**given, "fork_from": stored.fork_from}
    for name in ALGORITHM_FIELDS:
        if name in given and given[name] != getattr(stored, name):
            flag, was, now = option_flag(name), getattr(stored, name), shown(given[name])
            how = f"without {flag}" if was is None else f"with {flag} {shown(was)}, not {now}"
            raise ConfigError(
                f"this run was trained {how}: omit {flag} to resume it, or start a new --run-dir"
            )
    return dataclasses.replace(stored, **given)


def _same_directory(one: object, other: object) -> bool:
    # Two names of one directory, or one spelled two ways where it is gone.
    if not isinstance(one, str) or not isinstance(other, str):
        return False
    try:
        return os.path.samefile(one, other)
    except (OSError, ValueError):
        return os.path.normpath(one) == os.path.normpath(other)


MAX_JSON_DEPTH = 32  # how deep the JSON that pong-mp reads may nest (its own is 2 levels deep)


class JSONTooDeep(ValueError):
    """A JSON document nested deeper than MAX_JSON_DEPTH."""


def _deeper_than(value: object, depth: int) -> bool:
    # Recursive, but never more than `depth` levels down.
    if not isinstance(value, dict | list):
        return False
    if depth == 0:
        return True
    items = value.values() if isinstance(value, dict) else value
    return any(_deeper_than(item, depth - 1) for item in items)


def _strict_json(value: object) -> bool:
    # What config.json can hold so that any JSON reader, and parse_json, reads it back.
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is beyond a float's range")
    return number


def parse_json(text: str | bytes, finite: bool = True) -> Any:
    """json.loads, refusing a document deeper than MAX_JSON_DEPTH (JSONTooDeep, a ValueError)
    before a RecursionError in the parser or in the code that walks it; and, if `finite`,
    Python's NaN and Infinity and numbers past a float's range (ValueError)."""
    too_deep = JSONTooDeep(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    hooks = {"parse_constant": _not_json, "parse_float": _finite} if finite else {}
    try:
        value = json.loads(text, **hooks)
    except RecursionError:
        raise too_deep from None
    if _deeper_than(value, MAX_JSON_DEPTH):
        raise too_deep
    return value


def read_config(path: Path) -> TrainConfig:
    """Load and check config.json; a ConfigError names the file and the problem."""
    try:
        # NaN and Infinity are read, so that the field holding one is named below.
        data = parse_json(read_file(Path(path)).decode("utf-8"), finite=False)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except JSONTooDeep as exc:
        raise ConfigError(f"{path}: not a valid pong-mp config ({exc})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a valid pong-mp config (not UTF-8 JSON: {exc})") from None
    try:
        return TrainConfig.from_dict(data)
    except RemovedOptionError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: not a valid pong-mp config ({exc})") from None
