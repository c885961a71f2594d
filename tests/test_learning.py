"""The honest test that the whole loop learns: FakePong, a bounded budget, a clear margin.

FakePong with `fixed_serve` starts every rally the same way, so returning the serve is a
skill the policy can pick up within a few hundred episodes (as on real Pong, where the first
thing Karpathy's agent learns is the serve). A sign error, a broken gradient, a wrong sum or
a much slower learner leaves the running reward near the random level and fails this test,
for each learner. After UPDATES updates, against random play's -4.63: pg reaches +0.40, and
-4.56 with the learning rate cut tenfold; the actor-critic on the MLP +0.11, and -4.42; the
defaults +0.49, and -3.31 with a tenth of the rate and -1.57 with the filters' gradient
negated. (After 60 updates, with the filters' gradient negated, the defaults got to +0.63:
past their bar, which is why the test stops at 40.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pong_mp.config import PRESETS, TrainConfig
from pong_mp.envs import make_env
from tests.helpers import train

GAME = {"points_to_win": 5, "fixed_serve": True}
UPDATES = 40
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
    "pg": {**PRESETS["pg"], "lr": 3e-3},
    "ppo": {
        **PRESETS["pg"], "algo": "ppo", "optimizer": "adam", "lr": 3e-3, "epochs": 2,
        "minibatches": 2,
    },
    "conv": {"lr": 3e-3, "epochs": 2, "minibatches": 2},
}
"""Each learner's options for GAME: Karpathy's RMSProp step a batch and a small actor-critic
(2 passes of 2 minibatches, no entropy bonus) on the MLP, and the defaults (the actor-critic
on the convolutional policy) with 2 passes of 2 minibatches. With 4 passes of 4 minibatches
the conv actor-critic clears the bar even at a tenth of the learning rate (the defaults take
4 of 16, more steps still), so the test could not see a learner ten times slower."""

MARGINS = {"pg": MARGIN, "ppo": MARGIN, "conv": MARGIN + 1}
"""The points above random play each learner must reach. The conv policy's bar is a point
higher: with its filters' gradient of the wrong sign it still gets to -1.57 (W1 and W2 learn
on features that barely change), above the common bar; it reaches +0.49."""


@pytest.mark.slow
@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_running_reward_rises_clearly_above_random(
    tmp_path: Path, learner: str, clean_system
) -> None:
    baseline = random_policy_reward()
    assert baseline < -4  # the random policy loses almost every point
    config = TrainConfig(
        **{
            **LEARNERS[learner],
            "env": "FakePong-v0",
            "env_kwargs": GAME,
            "workers": 2,
            "batch_size": 10,
            "batches": UPDATES,
            "hidden": 32,
            "seed": 0,
            "run_dir": str(tmp_path),
        }
    )
    state = train(config, log=lambda line: None)
    assert state.batch == UPDATES
    assert state.running_reward is not None
    assert state.running_reward > baseline + MARGINS[learner], (state.running_reward, baseline)
