"""When is a point that a trained agent loses to v5's sticky actions decided?

Plays the agent (greedy or sampled) on pong-mp's fast ALE/Pong-v5 (sticky actions 0.25),
keeping the emulator's state before each step of the current rally. At every point it
loses, and at every fourth point it wins for comparison, it replays the rally from k steps
before the point (k in KS):

- once with sticky actions off from there on ("nosticky_k": the rally's outcome, +1 or -1);
- R times with sticky actions on, with fresh draws ("lose_k": the share of replays lost).

One JSON line per point replayed, one per game (its score), then one per kind of point
(lost, won) with the means over its points.

    python docs/eval/lost_points.py models/pong.npz 20 greedy \
        > docs/eval/conv-s0-late2-update-559-lost-points-greedy.jsonl

The committed output was made when models/pong.npz was the agent of late/conv-s0-late2 at
update 559, as its name says.
"""

from __future__ import annotations

import collections
import json
import sys
from typing import Any

import numpy as np

from pong_mp.api import Agent
from pong_mp.envs.atari import FastAtari

KS = (4, 8, 16, 32, 64)
"""Steps before the point that the rally is replayed from."""
R = 16
"""Replays with sticky actions on, from each of them."""


class Replayer:
    """An agent on FastAtari whose game can be saved before a step and played on from there."""

    def __init__(self, model: str, greedy: bool) -> None:
        """The agent in `model`, playing greedy or sampled."""
        self.agent = Agent.load(model, seed=1234)
        self.env = FastAtari("ALE/Pong-v5")
        self.greedy = greedy

    def save(self, observation: np.ndarray) -> tuple[Any, ...]:
        """Everything the game and the agent's next action depend on, but the sticky draws."""
        ale, agent = self.env._ale, self.agent
        return (ale.cloneState(), self.env._previous, agent._stream._prev.copy(),
                agent._started, observation)

    def load(self, saved: tuple[Any, ...]) -> np.ndarray:
        """Go back to `saved`; returns its observation."""
        state, previous, frame, started, observation = saved
        self.env._ale.restoreState(state)
        self.env._previous = previous
        self.agent._stream._prev = frame.copy()
        self.agent._started = started
        return observation

    def step(self, observation: np.ndarray) -> tuple[np.ndarray, float, bool]:
        """One step of the agent: the next observation, the reward, whether the game ended."""
        action = self.agent.act(observation, greedy=self.greedy)
        _, reward, terminated, truncated, _ = self.env.step(action)
        return self.env.render().copy(), reward, terminated or truncated

    def rally(self, saved: tuple[Any, ...], sticky: float, rng: np.random.Generator) -> int:
        """Play on from `saved` with `sticky` and `rng` until a point: +1, -1 (0: none)."""
        observation = self.load(saved)
        kept = self.env.sticky, self.env._np_random
        self.env.sticky, self.env._np_random = sticky, rng
        try:
            for _ in range(3000):
                observation, reward, done = self.step(observation)
                if reward != 0 or done:
                    return int(reward)
            return 0
        finally:
            self.env.sticky, self.env._np_random = kept


def replay_points(model: str, games: int, greedy: bool) -> list[dict[str, Any]]:
    """Play `games` games (seeds 10000 on) and replay their lost and some won points."""
    game_of = Replayer(model, greedy)
    rows = []
    for game in range(games):
        game_of.env.reset(seed=10_000 + game)
        game_of.agent.reset()
        observation = game_of.env.render().copy()
        history: collections.deque = collections.deque(maxlen=max(KS) + 1)
        score, step, done = [0, 0], 0, False
        while not done:
            history.append(game_of.save(observation))
            observation, reward, done = game_of.step(observation)
            step += 1
            if reward == 0:
                continue
            score[0 if reward > 0 else 1] += 1
            if reward < 0 or score[0] % 4 == 0:
                here = game_of.save(observation)
                row: dict[str, Any] = {"game": game, "step": step, "reward": int(reward)}
                for k in (k for k in KS if k <= len(history)):
                    saved = history[-k]
                    row[f"nosticky_{k}"] = game_of.rally(saved, 0.0, np.random.default_rng(0))
                    outcomes = [
                        game_of.rally(saved, 0.25, np.random.default_rng([game, step, k, i]))
                        for i in range(R)
                    ]
                    row[f"lose_{k}"] = sum(o < 0 for o in outcomes) / R
                game_of.load(here)
                rows.append(row)
                print(json.dumps(row), flush=True)
            history.clear()
        print(json.dumps({"game": game, "score": score}), flush=True)
    game_of.env.close()
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kind of point (lost, won) and k: the share won with sticky actions off from k
    steps before, and the mean share lost with them on."""
    out = []
    for sign, kind in ((-1, "lost"), (1, "won")):
        points = [row for row in rows if row["reward"] == sign]
        line: dict[str, Any] = {"points": kind, "n": len(points)}
        for k in KS:
            off = [row[f"nosticky_{k}"] > 0 for row in points if f"nosticky_{k}" in row]
            on = [row[f"lose_{k}"] for row in points if f"lose_{k}" in row]
            line[f"k{k}"] = {
                "replayed": len(on),
                "nosticky_won": round(float(np.mean(off)), 3) if off else None,
                "p_lose_resampled": round(float(np.mean(on)), 3) if on else None,
            }
        out.append(line)
    return out


if __name__ == "__main__":
    replayed = replay_points(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "greedy")
    for line in summary(replayed):
        print(json.dumps(line))
