"""Milestones of Dopamine's published Pong baselines, trained with sticky actions.

Dopamine (github.com/google/dopamine) trains its Atari agents on ALE with sticky actions
(repeat_action_probability 0.25, as ALE/Pong-v5) and publishes each agent's training curve:
the mean return of the games in each iteration of 250,000 agent steps (1 M frames), 5 seeds
an agent. This reads that file and writes, per agent and seed, the agent steps after which
the iteration's mean first reached 0, +10, +18 and +20, and where the curve levels off,
so that pong-mp's figures (env steps, also agent steps) can be set beside them.

    curl -sLO https://raw.githubusercontent.com/google/dopamine/\
8842298e89cfe42c80ea71f63913017696785f0f/baselines/atari/data/pong.json
    python docs/reference/dopamine_milestones.py pong.json > docs/reference/dopamine-pong.json
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

SOURCE = (
    "https://github.com/google/dopamine/blob/8842298e89cfe42c80ea71f63913017696785f0f/"
    "baselines/atari/data/pong.json"
)
STEPS_PER_ITERATION = 250_000
"""Dopamine's Runner.training_steps: agent steps (4 frames each) an iteration."""
LEVELS = (0, 10, 18, 20)
BUDGETS = (6_060_000, 12_110_000)
"""pong-mp's 30 and 60 minutes at the defaults' 3,365 env steps/s on 2 cores."""


def runs(rows: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """Each agent's curves, one list of iteration means per seed (a seed's rows run from
    iteration 0 up, one seed after another)."""
    curves: dict[str, list[list[float]]] = {}
    for row in rows:
        seeds = curves.setdefault(row["Agent"], [])
        if row["Iteration"] == 0:
            seeds.append([])
        seeds[-1].append(float(row["Value"]))
    return curves


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


def main(path: str) -> None:
    """Print the milestones of the Dopamine curves in `path` as JSON."""
    with open(path) as file:
        curves = runs(json.load(file))
    out = {
        "source": SOURCE,
        "sticky_actions": 0.25,
        "steps_per_iteration": STEPS_PER_ITERATION,
        "value": "mean training return of an iteration's games (epsilon 0.01 greedy)",
        "agents": {agent: [milestones(c) for c in seeds] for agent, seeds in curves.items()},
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
