"""The honest test that the whole loop learns: FakePong, a bounded budget, a clear margin.

FakePong with `fixed_serve` starts every rally the same way, so returning the serve is a
skill the policy can pick up within a few hundred episodes (as on real Pong, where the first
thing Karpathy's agent learns is the serve). A sign error, a broken gradient, a wrong sum or
a much slower learner leaves the running reward near the random level and fails this test,
for each learner: with a sign flipped, or the learning rate cut tenfold, it fails (pg ends
near -4 with lr 3e-4, the actor-critic at -4.0 with 3e-4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pong_mp.config import TrainConfig
from pong_mp.envs import make_env
from pong_mp.trainer import train

GAME = {"points_to_win": 5, "fixed_serve": True}
UPDATES = 60
MARGIN = 3.5  # points out of 5 per game


def random_policy_reward(episodes: int = 30) -> float:
    """Mean reward of uniformly random UP/DOWN play on GAME."""
    env = make_env("FakePong-v0", **GAME)
    rng = np.random.default_rng(0)
    totals = []
    for seed in range(episodes):
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.choice([2, 3])))
            total += reward
            done = terminated or truncated
        totals.append(total)
    return float(np.mean(totals))


LEARNERS = {
    "pg": {"lr": 3e-3},
    "ppo": {"algo": "ppo", "optimizer": "adam", "lr": 3e-3, "epochs": 2, "minibatches": 2},
}
"""Each learner's options for GAME: Karpathy's RMSProp step a batch, and a small actor-critic
(2 passes of 2 minibatches)."""


@pytest.mark.slow
@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_running_reward_rises_clearly_above_random(
    tmp_path: Path, learner: str, clean_system
) -> None:
    baseline = random_policy_reward()
    assert baseline < -4  # the random policy loses almost every point
    config = TrainConfig(
        env="FakePong-v0",
        env_kwargs=GAME,
        workers=2,
        batch_size=10,
        batches=UPDATES,
        hidden=32,
        seed=0,
        run_dir=str(tmp_path),
        **LEARNERS[learner],
    )
    state = train(config, log=lambda line: None)
    assert state.batch == UPDATES
    assert state.running_reward is not None
    assert state.running_reward > baseline + MARGIN, (state.running_reward, baseline)
