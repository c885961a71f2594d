"""The Python API: `pong_mp.train(...)` and `pong_mp.Agent`, for scripts and notebooks.

    import pong_mp

    state = pong_mp.train(run_dir="runs/fake", env="FakePong-v0", batches=20)
    agent = pong_mp.Agent.load("models/pong.npz")
    agent.reset()
    action = agent.act(observation)   # gymnasium's ALE/Pong-v5 RGB frame -> 2 (UP) or 3 (DOWN)
"""

from __future__ import annotations

import dataclasses
import errno
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pong_mp import policy
from pong_mp.checkpoint import CheckpointError, load_policy, stored_shape
from pong_mp.config import TrainConfig, apply_preset, check_types
from pong_mp.files import path_too_long
from pong_mp.frames import FRAME_SHAPE, NO_PIXELS, NO_VALUES, BinaryInputs
from pong_mp.progress import BarReporter, QuietReporter, Reporter
from pong_mp.signals import Interrupted
from pong_mp.state import TrainState


def _plain(value: Any) -> Any:
    """A notebook's value as TrainConfig takes it: numpy scalars and arrays as Python's
    numbers and lists, paths as strings; anything else as it is (check_types judges it)."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple):
        return type(value)(_plain(item) for item in value)
    return value


def train(
    run_dir: str | Path = TrainConfig.run_dir,
    *,
    resume: bool = False,
    preset: str | None = None,
    env_arg: dict[str, Any] | None = None,
    progress: bool = True,
    **options: Any,
) -> TrainState:
    """Train (or with `resume=True` continue) the run in `run_dir`; returns its final state
    (`.batch`, `.episodes`, `.steps`, `.running_reward`, ...).

    Options are the fields of `TrainConfig`: `pong-mp train`'s long options with underscores
    (`batch_size`, `lr_drop_at`, ...); `env_arg` is a dict of env arguments and `preset` a
    preset's name. On resume, only the options given here change the stored run (and only
    those that may change); with `fork_from="runs/a"`, a new run starts from that run's
    checkpoint, with its algorithm options except those given here. A progress bar
    (tqdm.auto: a widget in Jupyter) shows unless `progress=False`.

    Ctrl-C (KeyboardInterrupt in a notebook) saves the checkpoint and raises
    KeyboardInterrupt; `train(run_dir, resume=True)` continues. Bad options raise
    pong_mp.ConfigError, RunDirError, CheckpointError or FileError with a one-line message;
    so does a call from a thread other than the main one (ConfigError). A backend that
    cannot start raises pong_mp.BackendUnavailable.
    """
    from pong_mp import trainer
    from pong_mp.config import ConfigError
    from pong_mp.rundir import open_run, where_it_stands

    # run_dir is the first argument, and env arguments are env_arg, as on the command line.
    allowed = {f.name for f in dataclasses.fields(TrainConfig)} - {"run_dir", "env_kwargs"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(f"unknown option{'s' * (len(unknown) > 1)}: {', '.join(unknown)}")
    if threading.current_thread() is not threading.main_thread():
        raise ConfigError(
            "pong_mp.train runs in the main thread only: it takes Ctrl-C and SIGTERM there, "
            "to save the checkpoint as it stops"
        )
    run_dir = _plain(run_dir)
    if not isinstance(run_dir, str) or "\0" in run_dir:
        raise ConfigError(f"run_dir must be a path, not {run_dir!r:.200}")
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"preset must be a preset's name, not {preset!r}")
    for name, flag in (("resume", resume), ("progress", progress)):
        if not isinstance(_plain(flag), bool):  # progress="no" would show the bar
            raise ConfigError(f"{name} must be True or False, not {flag!r:.80}")
    given = {name: _plain(value) for name, value in options.items()}
    check_types(given)  # before a fork or a resume looks at a path or a number given
    if env_arg is not None:
        if not isinstance(env_arg, Mapping):
            raise ConfigError(f"env_arg must be a dict of env arguments, not {env_arg!r}")
        given["env_kwargs"] = {  # numpy's at the top: a value may nest (config checks how deep)
            key: value.tolist() if isinstance(value, np.generic | np.ndarray) else value
            for key, value in env_arg.items()
        }
    given = apply_preset(preset, given, explicit=set(given))
    try:
        with open_run(run_dir, resume, given) as (config, state):
            reporter = _progress(state.batch, config.batches) if progress else QuietReporter()
            try:
                return trainer.run(config, state, resumed=resume, reporter=reporter)
            except Interrupted as exc:
                where, resumable = where_it_stands(Path(run_dir), exc.reached)
                how = f": continue with pong_mp.train({str(run_dir)!r}, resume=True)"
                raise KeyboardInterrupt(f"stopped by {exc}; {where}{how * resumable}") from None
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        raise path_too_long(exc) from None


def _progress(start: int, total: int | None) -> Reporter:
    # The bar needs a stderr that takes its first write (a script run with 2>&- has none, a
    # closed or full one refuses it): without one the run goes on without the bar.
    if sys.stderr is None or sys.stderr.closed:
        return QuietReporter()
    try:
        return BarReporter(start, total, sys.stderr, notebook=True)  # a widget in Jupyter
    except (OSError, ValueError):
        return QuietReporter()


class Agent:
    """A trained policy that plays gymnasium's ALE/Pong-v5 from its raw RGB frames.

    Call `reset()` when a game starts and `act(observation)` after every step; the policy
    sees what it saw in training: the difference between this frame and the last.
    """

    def __init__(
        self, params: np.ndarray, shape: policy.NetShape, seed: int | None = None
    ) -> None:
        """An agent with flat float64 `params` of a policy of `shape`; `seed` seeds the
        sampling of actions (None: fresh entropy)."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)
                                 or seed < 0):
            raise ValueError(f"seed must be a whole number >= 0 or None, not {seed!r:.80}")
        # Training's own forward pass: float32 weights through the compiled loops, so the
        # agent's probabilities are the bits a worker computes, at a fraction of the cost of
        # the dense float64 reference.
        self._weights = policy.Weights32.from_params(np.asarray(params, np.float64), shape)
        self._forward = policy.SparseForward(shape)
        self.shape = shape
        self._stream = BinaryInputs()  # the stream training uses on RGB frames
        self._rng = np.random.default_rng(seed)
        self._started = False

    @classmethod
    def load(cls, path: str | Path, seed: int | None = None) -> Agent:
        """The agent of a checkpoint (or a run directory holding one) or model file
        (`pong-mp export`); CheckpointError if it is missing, damaged or not pong-mp's."""
        if not isinstance(path, str | os.PathLike):
            raise CheckpointError(f"a model is named by its path, not {path!r:.80}")
        params, config = load_policy(Path(path))
        agent = cls(params, stored_shape(config), seed=seed)
        agent.config = config
        return agent

    config: dict[str, Any] = {}  # noqa: RUF012 (replaced per instance by load)
    """The training config stored with the policy (env, hidden, ...), when loaded."""

    def reset(self) -> None:
        """Start a new game: forget the previous frame."""
        self._started = False

    def probability_up(self, observation: np.ndarray) -> float:
        """P(UP) for this frame (210 x 160 x 3 uint8), given the frames seen since reset;
        ValueError for anything else."""
        array = isinstance(observation, np.ndarray)
        if array:  # a subclass (a masked array) as the plain array of its values
            observation = np.asarray(observation)
        if not (array and observation.shape == FRAME_SHAPE and observation.dtype == np.uint8):
            what = f"{observation.dtype} {observation.shape}" if array else observation
            if isinstance(observation, tuple):  # env.reset()'s (observation, info)
                what = f"a tuple of {len(observation)} (reset() returns the frame first)"
            raise ValueError(
                f"an observation is an RGB frame, a {FRAME_SHAPE} uint8 array (ALE's Pong "
                f"observations), not {what!s:.80}"
            )
        if self._started:
            changed, values = self._stream.step(observation)
        else:  # a game's first frame: no difference yet, the input is all zeros
            self._stream.reset(observation)
            self._started = True
            changed, values = NO_PIXELS, NO_VALUES
        return self._forward.p_up(self._weights, changed, values)

    def act(self, observation: np.ndarray, greedy: bool = False) -> int:
        """The action for this frame: 2 (UP) or 3 (DOWN), sampled as in training, or the
        likelier one if `greedy`."""
        return policy.choose_action(self.probability_up(observation), self._rng.random, greedy)
