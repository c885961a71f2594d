"""Playing full games with a trained policy, to see how well it does."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from pong_mp import policy
from pong_mp.envs import make_training_env
from pong_mp.episode import episode_seed, run_episode
from pong_mp.signals import at_once, check_stop


@dataclass(frozen=True)
class GameScore:
    """The result of one game."""

    agent: int  # points won by the policy
    opponent: int  # points won by the built-in opponent
    steps: int  # env steps the game took


class _Interruptible(gym.Wrapper):
    """An env whose reset and step a stop signal interrupts at once (`signals.at_once`)."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """The env's reset."""
        with at_once():
            return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """The env's step."""
        with at_once():
            return self.env.step(action)


def play_games(
    params: np.ndarray,
    shape: policy.NetShape,
    env_id: str,
    games: int,
    seed: int = 0,
    greedy: bool = False,
    env_kwargs: dict[str, Any] | None = None,
    on_frame: Callable[[np.ndarray], None] | None = None,
    on_game: Callable[[GameScore], None] | None = None,
) -> list[GameScore]:
    """Play `games` full games with a policy of `shape`; game i is seeded from (seed, i), so
    results repeat. The policy samples its actions as in training, or takes the likelier one
    if `greedy`. `on_frame`, if given, receives the RGB frame after every step (for
    recording), and `on_game` each game's score as soon as the game ends."""
    weights = policy.Weights32.from_params(params, shape)
    forward = policy.SparseForward(shape)
    kwargs = dict(env_kwargs or {})
    if on_frame is not None:
        kwargs["render_mode"] = "rgb_array"
    with at_once():  # the user's env may hang as it is made, or in a step: a stop ends it
        env, stream = make_training_env(env_id, **kwargs)
    stepped = _Interruptible(env)
    p_up = functools.partial(forward.p_up, weights)
    game = {"agent": 0, "opponent": 0, "steps": 0}

    def on_step(action: int, p: float, reward: float) -> None:
        check_stop()  # a game lasts thousands of steps: a stop ends it at the step it came in
        game["agent"] += reward > 0
        game["opponent"] += reward < 0
        game["steps"] += 1
        if on_frame is not None:
            on_frame(env.render())

    scores = []
    try:
        for i in range(games):
            game.update(agent=0, opponent=0, steps=0)
            run_episode(stepped, stream, episode_seed(seed, i), p_up, on_step, greedy=greedy)
            scores.append(GameScore(**game))
            if on_game is not None:
                on_game(scores[-1])
            check_stop()  # one that came in on_game ends the games here
    finally:
        env.close()
    return scores


def evaluation(scores: list[GameScore]) -> dict[str, Any]:
    """Games won and lost, and the mean and standard deviation of the point difference."""
    diffs = np.array([s.agent - s.opponent for s in scores], dtype=float)
    return {
        "games": len(scores),
        "won": int(sum(s.agent > s.opponent for s in scores)),
        "lost": int(sum(s.agent < s.opponent for s in scores)),
        "mean_difference": float(diffs.mean()) if len(diffs) else 0.0,
        "std_difference": float(diffs.std()) if len(diffs) else 0.0,
        "scores": [dataclasses.asdict(s) for s in scores],
    }


def summary(scores: list[GameScore]) -> str:
    """One line: games won and lost, and the point difference's mean and spread."""
    e = evaluation(scores)
    return (
        f"won {e['won']} of {e['games']} games, lost {e['lost']}; point difference "
        f"{e['mean_difference']:+.2f} on average (std {e['std_difference']:.2f})"
    )
