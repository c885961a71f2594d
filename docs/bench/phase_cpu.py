"""How busy the CPUs are while an update plays its batch, and while it learns from it.

`pong-mp bench` gives an update's play share and the CPUs' busy share over the whole
training (`play_share`, `cpu_busy`). This splits the second by the two phases: a phase
whose CPUs are nearly all busy is bound by its work, one whose CPUs are idle by waiting (a
batch's longest episode, a round's barrier). It trains `--simulate`'s FakePong-v0 (steps
that sleep --step-seconds) with train's defaults but `--policy mlp --hidden H`, one batch
a worker, on the local backend, for each --hidden given, and prints JSON with each run's
seconds and CPU busy share per phase, from /proc/stat (Linux; a quiet machine):

    python docs/bench/phase_cpu.py --workers 32 --hidden 200 8 > docs/bench/DATE-NAME.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any


def phases(workers: int, hidden: int, updates: int, step_seconds: float) -> dict[str, Any]:
    """Mean seconds an update and the CPUs' busy share, in play and in learning."""
    import time

    import pong_mp
    from pong_mp import trainer
    from pong_mp.tools.bench import cpu_ticks, simulated_env

    spent = {phase: [0.0, 0, 0] for phase in ("play", "learn")}  # seconds, busy, all ticks
    make = trainer.make_learner

    def timed(phase: str, call: Any) -> Any:
        def run(*args: Any) -> Any:
            ticks, start = cpu_ticks(), time.perf_counter()
            result = call(*args)
            now, elapsed = cpu_ticks(), time.perf_counter() - start
            spent[phase][0] += elapsed
            spent[phase][1] += now[0] - ticks[0]
            spent[phase][2] += now[1] - ticks[1]
            return result

        return run

    def make_timed(config: Any) -> Any:
        learner = make(config)
        learner.play = timed("play", learner.play)
        learner.learn = timed("learn", learner.learn)
        return learner

    trainer.make_learner = make_timed
    try:
        with tempfile.TemporaryDirectory() as run_dir:
            pong_mp.train(
                run_dir, env="FakePong-v0", env_arg=simulated_env(step_seconds), workers=workers,
                batch_size=workers, policy="mlp", hidden=hidden, batches=updates,
                tensorboard=False,
            )  # fmt: skip
            lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
            steps = sum(json.loads(line)["steps"] for line in lines)
    finally:
        trainer.make_learner = make
    return {
        "hidden": hidden,
        # Each worker plays one episode of an update: their mean length, against the play's
        # seconds, is how long the play waits on its longest episodes.
        "mean_episode_steps": steps / updates / workers,
        "mean_episode_sleep_seconds": steps / updates / workers * step_seconds,
        **{
            f"{phase}_{what}": value
            for phase, (seconds, busy, ticks) in spent.items()
            for what, value in (("seconds", seconds / updates), ("cpu_busy", busy / ticks))
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--hidden", type=int, nargs="+", default=[200])
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--step-seconds", type=float, default=0.004)
    args = parser.parse_args()
    from pong_mp.tools.bench import where_measured

    runs = [phases(args.workers, h, args.updates, args.step_seconds) for h in args.hidden]
    print(json.dumps({
        "command": "python docs/bench/phase_cpu.py --workers "
                   f"{args.workers} --hidden {' '.join(map(str, args.hidden))} --updates "
                   f"{args.updates} --step-seconds {args.step_seconds}",
        "workers": args.workers, "batch_size": args.workers, "runs": runs, **where_measured(),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
