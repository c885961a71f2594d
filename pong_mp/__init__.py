"""pong-mp: Pong from pixels (an actor-critic or Karpathy's learner) on a process pool or Ray.

The Python API (see README, "Python API"):

    pong_mp.train(run_dir, **options)   train, or continue with resume=True -> final state
    pong_mp.Agent.load(path)            a trained policy that plays gymnasium's ALE/Pong-v5
    pong_mp.ConfigError, ...            the errors they raise (__all__ lists them)

Module map, in the order data flows through an update:

    config.py      TrainConfig: every option, its default, type, limits, help and group;
                   presets; the options removed since (REMOVED) and the commit that has them
    rundir.py      the run directory: files, lock, checks for a new run, a resume and a fork
    trainer.py     the coordinator: drive the run's learner over a backend, log
                   (progress.py, tracking.py for TensorBoard) and checkpoint
    learner.py     the learner interface (play a batch, then learn from it) and what the
                   learners share: schedules, the running reward, a round of tasks
    pg.py          Karpathy's learner (--algo pg): an episode played into its gradient
                   (gradient.py: folded rally by rally in fixed memory), one step a batch
    ppo.py         the actor-critic (--algo ppo): an episode's trajectory, GAE, minibatches,
                   the clipped surrogate's gradient, and the update's passes
    state.py       TrainState (what an update changes), a new run's state, a fork's reshaping
    backends/      where tasks are done: in this process, on a process pool, or on Ray
                   (its package docstring maps its modules)
    episode.py     tasks and results, and one episode's loop (seed, play)
    frames.py      frames -> binary 80x80 -> sparse frame differences
    policy.py      the network (dense float64 reference); sparse.pyx the compiled loops
                   (per step, the actor-critic's passes, the optimizers' steps), built
                   twice (AVX2 and any CPU) and loaded for this CPU by sparse.py
    batch_sum.py   the fixed order in which a batch's gradients are added
    optim.py       RMSProp and Adam, and the drops of the schedules
    checkpoint.py  atomic save and validated load; files.py atomic writes
    envs/          making envs: registry.py (ids), atari.py (FastAtari), fake_pong.py
    api.py         pong_mp.train and pong_mp.Agent
    cli.py         the pong-mp command; signals.py stop signals: noted when they come,
                   raised as one exception where the code checks (a closed stdout is one
                   too: progress.py)
    tools/         around training: play.py, recording.py, gif.py, plot.py, bench.py,
                   projection.py (bench --project's model)
"""

from typing import Any

from pong_mp import envs as _envs  # registers FakePong-v0 with gymnasium

__version__ = "0.1.0"
del _envs

_WHERE = {
    "Agent": "api", "train": "api", "ConfigError": "config", "RunDirError": "rundir",
    "CheckpointError": "checkpoint", "FileError": "files", "MainGuardError": "backends.base",
    "BackendUnavailable": "backends.base", "WorkerError": "backends.base",
    "NonFiniteError": "learner",
}  # fmt: skip
"""The API and the errors it raises, by the module that holds each."""

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    # Imported on first use: worker processes import this package too, and need none of it.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"pong_mp.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'pong_mp' has no attribute {name!r}")
