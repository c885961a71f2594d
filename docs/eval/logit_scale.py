"""How much a trained agent loses by sampling its actions: play it with its logit scaled.

A two-action agent plays UP with probability sigmoid(z). Scaled by s, sigmoid(s z) keeps
its likelier action and makes it surer: s = 1 is the agent as trained (and as `pong-mp play`
samples it), a large s its greedy play. For each scale this plays the same games (seeds
20000 on, pong-mp's fast ALE/Pong-v5 with v5's sticky actions) and prints one JSON line:
the mean score, its standard error, the mean entropy a step (nats) and each game's score.

    python docs/eval/logit_scale.py models/pong.npz 20 1,2,4,1000 \
        > docs/eval/conv-s0-late2-update-559-logit-scale.jsonl

A diagnostic, not a way to play: an agent's sampled score is the one at scale 1.

The committed output was made when models/pong.npz was the agent of late/conv-s0-late2 at
update 559, as its name says.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

from pong_mp import policy
from pong_mp.api import Agent
from pong_mp.envs.atari import FastAtari


def play_scaled(model: str, games: int, scale: float) -> dict[str, object]:
    """Play `games` games of the agent in `model` with its logit times `scale`."""
    env = FastAtari("ALE/Pong-v5")
    agent = Agent.load(model)
    rng = np.random.default_rng(7)
    scores, entropies = [], []
    for game in range(games):
        env.reset(seed=20_000 + game)
        agent.reset()
        observation = env.render()
        score = 0.0
        while True:
            p = min(max(agent.probability_up(observation), 1e-12), 1 - 1e-12)
            z = max(min(scale * math.log(p / (1 - p)), 700.0), -700.0)
            q = 1 / (1 + math.exp(-z))
            entropies.append(policy.entropy(q))
            action = policy.choose_action(q, rng.random, greedy=False)
            _, reward, terminated, truncated, _ = env.step(action)
            observation = env.render()
            score += reward
            if terminated or truncated:
                break
        scores.append(score)
    env.close()
    return {
        "model": model, "scale": scale, "games": games, "mean": float(np.mean(scores)),
        "se": float(np.std(scores, ddof=1) / math.sqrt(games)),
        "entropy": float(np.mean(entropies)), "scores": scores,
    }


if __name__ == "__main__":
    for s in sys.argv[3].split(","):
        print(json.dumps(play_scaled(sys.argv[1], int(sys.argv[2]), float(s))), flush=True)
