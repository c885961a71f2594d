"""Milestones of Dopamine's published Pong baselines, trained with sticky actions.

Dopamine (github.com/google/dopamine) trains its Atari agents on ALE with sticky actions
(repeat_action_probability 0.25, as ALE/Pong-v5) and publishes each agent's training curve:
the mean return of the games in each iteration of 250,000 agent steps (1 M frames), 5 seeds
an agent, in three sets (SETS): its TensorFlow agents on the Nature DQN network, and its JAX
agents on that network and on Impala's deeper residual one. This reads those files and
writes, per set, agent and seed, the agent steps after which the iteration's mean first
reached 0, +10, +18 and +20, and where the curve levels off, so that pong-mp's figures (env
steps, also agent steps) can be set beside them.

    for f in pong.json pong_CNN.json pong_Impala.json; do
      curl -sLO https://raw.githubusercontent.com/google/dopamine/\
9f616b924451cc5c23800c49e8907ebc67f8498b/baselines/atari/data/$f
    done
    python docs/reference/dopamine_milestones.py . > docs/reference/dopamine-pong.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

SOURCE = (
    "https://github.com/google/dopamine/blob/9f616b924451cc5c23800c49e8907ebc67f8498b/"
    "baselines/atari/data/"
)
SETS = {
    "tf-nature": "pong.json",
    "jax-nature": "pong_CNN.json",
    "jax-impala": "pong_Impala.json",
}
"""Each set's file: the TensorFlow agents on the Nature network (three conv layers, 512
units), and the JAX agents on that network and on Impala's (15 conv layers in residual
blocks, 512 units)."""
STEPS_PER_ITERATION = 250_000
"""Dopamine's Runner.training_steps: agent steps (4 frames each) an iteration."""
LEVELS = (0, 10, 18, 20)
BUDGETS = (6_060_000, 12_110_000)
"""pong-mp's 30 and 60 minutes at the defaults' 3,365 env steps/s on 2 cores."""


def runs(rows: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """Each agent's curves, one list of iteration means per seed: the k-th row of an agent's
    iteration is seed k's, whether the file lists a seed's whole curve after another's or
    the seeds of each iteration together. (pong_Impala.json lacks one Rainbow seed's last
    iteration; that curve, taken as the last seed's, ends one iteration early.)"""
    rows_of: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        rows_of.setdefault(row["Agent"], {}).setdefault(row["Iteration"], []).append(
            float(row["Value"])
        )
    return {
        agent: [[its[i][k] for i in sorted(its) if k < len(its[i])] for k in range(len(its[0]))]
        for agent, its in rows_of.items()
    }


def milestones(curve: list[float]) -> dict[str, Any]:
    """Agent steps to each of LEVELS (None: not reached), the mean of the last iteration
    that ends within each of BUDGETS, the best iteration's and the last 10 iterations'."""
    steps_to = {
        str(level): next(
            ((i + 1) * STEPS_PER_ITERATION for i, v in enumerate(curve) if v >= level), None
        )
        for level in LEVELS
    }
    at = {str(b): curve[b // STEPS_PER_ITERATION - 1] for b in BUDGETS}
    return {
        "iterations": len(curve),
        "steps_to": steps_to,
        "mean_at_steps": at,
        "max": max(curve),
        "last_10_iterations": statistics.mean(curve[-10:]),
    }


def main(folder: str) -> None:
    """Print the milestones of the Dopamine curves in `folder` (SETS' files) as JSON."""
    sets = {}
    for name, file_name in SETS.items():
        with open(Path(folder) / file_name) as file:
            curves = runs(json.load(file))
        sets[name] = {
            "file": file_name,
            "agents": {agent: [milestones(c) for c in seeds] for agent, seeds in curves.items()},
        }
    out = {
        "source": SOURCE,
        "sticky_actions": 0.25,
        "steps_per_iteration": STEPS_PER_ITERATION,
        "value": "mean training return of an iteration's games (epsilon 0.01 greedy)",
        "sets": sets,
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
