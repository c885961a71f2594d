"""Measurements of raw env speed: `python -m pong_mp.bench` compares FakePong with ALE Pong.

Rounds of the two envs alternate, so that noise on a shared machine hits both alike, and
the figure that matters is their ratio within the run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pong_mp.envs import make_env


def env_steps_per_sec(env_id: str, seconds: float, seed: int = 0) -> float:
    """Env steps per second in this process with random UP/DOWN actions, resets included."""
    env = make_env(env_id)
    rng = np.random.default_rng(seed)
    actions = rng.choice([2, 3], size=4096)
    try:
        env.reset(seed=seed)
        steps = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:  # ~50 ns: small beside any env step
            _, _, terminated, truncated, _ = env.step(int(actions[steps % 4096]))
            steps += 1
            if terminated or truncated:
                env.reset()
        return steps / (time.perf_counter() - start)
    finally:
        env.close()


def compare_envs(env_ids: tuple[str, ...], seconds: float, rounds: int) -> dict[str, list[float]]:
    """Steps/s of each env in `rounds` alternating rounds of `seconds` each."""
    rates: dict[str, list[float]] = {env_id: [] for env_id in env_ids}
    for r in range(rounds):
        for env_id in env_ids:
            rates[env_id].append(env_steps_per_sec(env_id, seconds, seed=r))
    return rates


def main() -> None:
    """Print FakePong's and ALE Pong's raw speed and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per env")
    args = parser.parse_args()
    rates = compare_envs(("ALE/Pong-v5", "FakePong-v0"), args.seconds, args.rounds)
    medians = {env_id: float(np.median(r)) for env_id, r in rates.items()}
    for env_id, median in medians.items():
        print(f"{env_id:<12} {median:>10,.0f} steps/s (median of {args.rounds} rounds)")
    print(f"FakePong-v0 / ALE/Pong-v5: {medians['FakePong-v0'] / medians['ALE/Pong-v5']:.1f}x")


if __name__ == "__main__":
    main()
