"""pong-mp: policy-gradient Pong from pixels on a process pool or a Ray cluster.

The Python API (see README, "Python API"):

    pong_mp.train(run_dir, **options)   train, or continue with resume=True -> final state
    pong_mp.Agent.load(path)            a trained policy that plays gymnasium's ALE/Pong-v5

Module map, in the order data flows through an update:

    config.py      TrainConfig: every option, its default, type and limits; presets
    rundir.py      the run directory: files, lock, checks for a new run and a resume
    trainer.py     the coordinator: hand out episodes, sum gradients, step the optimizer
    backends/      where episodes are played: serial.py, local.py (process pool), ray.py
    episode.py     one episode: play it and fold its gradient in fixed memory
    policy.py      the network (dense float64 reference); sparse.pyx the compiled loops
    frames.py      frames -> sparse frame differences
    batch_sum.py   the fixed order in which a batch's gradients are added
    optim.py       RMSProp and Adam
    checkpoint.py  atomic save and validated load; files.py atomic writes
    envs.py, atari.py, fake_pong.py   making envs: FastAtari, FakePong-v0
    api.py         pong_mp.train and pong_mp.Agent
    cli.py         the pong-mp command; play.py, plot.py, recording.py, progress.py, bench.py
"""

from typing import Any

from pong_mp import envs as _envs  # registers FakePong-v0 with gymnasium

__version__ = "0.1.0"
del _envs

__all__ = ["Agent", "train"]


def __getattr__(name: str) -> Any:
    # Imported on first use: worker processes import this package too, and need none of it.
    if name in __all__:
        from pong_mp import api

        return getattr(api, name)
    raise AttributeError(f"module 'pong_mp' has no attribute {name!r}")
