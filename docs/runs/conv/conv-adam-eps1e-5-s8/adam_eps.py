"""The defaults on seed 8 with Adam's epsilon at 1e-5 (CleanRL's and Stable-Baselines3's)
instead of pong-mp's 1e-8: the run of this record, and its resume after a stop.

    .venv/bin/python docs/runs/conv/conv-adam-eps1e-5-s8/adam_eps.py runs/conv-adam-eps1e-5-s8

It was stopped (SIGTERM) after update 124; the same command continues it.
"""

import sys
from pathlib import Path

import pong_mp
import pong_mp.optim as optim

optim.ADAM_EPS = 1e-5  # read by the coordinator's Adam step at each call

if __name__ == "__main__":
    run_dir = sys.argv[1]
    if Path(run_dir, "checkpoint.npz").exists():
        pong_mp.train(run_dir, resume=True, progress=False)
    else:
        pong_mp.train(run_dir, seed=8, target_reward=18.0, tensorboard=False, progress=False)
