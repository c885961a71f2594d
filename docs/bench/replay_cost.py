"""What the published agents that reach +20 on sticky-action Pong within 12 M env steps
would cost on this machine's CPU: the network work of a replay learner, timed in PyTorch.

Dopamine's agents (docs/learning.md, "What published agents reach") act on 4 stacked
84x84 frames and, every 4 env steps, take a gradient step on a minibatch of 32 transitions
from their replay buffer, which needs the online network's forward and backward passes and
the target network's forward pass on 32 states each; acting needs one forward pass of a
single state per env step. This times those passes, on one thread, for the two networks
Dopamine publishes Pong curves on:

- nature: the Nature DQN network (convs of 32 8x8/4, 64 4x4/2, 64 3x3/1, then 512 units),
  padded as Dopamine's;
- impala: Dopamine's `ImpalaEncoder` (three stacks of 16, 32, 32 channels, each a 3x3 conv,
  a 3x3 max-pool of stride 2 and two residual blocks of two 3x3 convs: 15 conv layers),
  then 512 units;

each with one output per action (Pong's 6), as DQN has. IQN's head, run for 64 quantile
samples a state (its 512 units then cost 64 times theirs here: on Impala's network more
than the 15 conv layers), comes on top, so its figure for a network is a lower bound. From these it
prints the hours that 12.11 M env steps (the defaults' hour at 3,365 steps/s) would take
for the network work alone, on one core and on two (if it split perfectly), with no
emulator, replay buffer or IQN head.

PyTorch is not a dependency of pong-mp; install it into `.torch/` in the checkout (ignored
by git) and run this from the checkout:

    pip install --target .torch torch
    PYTHONPATH=.torch python docs/bench/replay_cost.py \
        > docs/bench/2026-11-26-replay-network-cost.json
"""

from __future__ import annotations

import json
import os
import time
from datetime import date

import torch
from torch import nn

ACTIONS = 6
"""Pong's action set in Dopamine."""
BATCH = 32
"""Transitions a gradient step (Dopamine's ReplayBuffer.batch_size)."""
UPDATE_PERIOD = 4
"""Env steps between gradient steps (Dopamine's update_period)."""
ENV_STEPS = 12.11e6
"""The defaults' hour at 3,365 env steps/s: the budget the goal gives +20."""
REPEATS = 5
"""Gradient steps (and 4 times as many acting passes) timed a round; the fastest of
ROUNDS rounds is used."""
ROUNDS = 3


def nature() -> nn.Module:
    """The Nature DQN network on 4 stacked 84x84 frames, padded as Dopamine's is ('SAME':
    maps of 21, 11 and 11 a side, the extra padding after, as TensorFlow and Flax put it)."""
    return nn.Sequential(
        nn.ZeroPad2d(2), nn.Conv2d(4, 32, 8, 4), nn.ReLU(),
        nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, 1, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * 11 * 11, 512), nn.ReLU(), nn.Linear(512, ACTIONS),
    )


class Residual(nn.Module):
    """Dopamine's residual block: relu, 3x3 conv, relu, 3x3 conv, plus the input."""

    def __init__(self, channels: int) -> None:
        """Two 3x3 convs of `channels`."""
        super().__init__()
        self.first = nn.Conv2d(channels, channels, 3, padding=1)
        self.second = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output."""
        return x + self.second(torch.relu(self.first(torch.relu(x))))


def impala() -> nn.Module:
    """Dopamine's ImpalaEncoder (stacks of 16, 32, 32 channels, 2 blocks each), then 512
    units and the actions."""
    layers: list[nn.Module] = []
    channels_in, side = 4, 84
    for channels in (16, 32, 32):
        layers += [
            nn.Conv2d(channels_in, channels, 3, padding=1),
            nn.MaxPool2d(3, 2, padding=1),
            Residual(channels),
            Residual(channels),
        ]
        channels_in, side = channels, (side + 1) // 2
    return nn.Sequential(
        *layers, nn.ReLU(), nn.Flatten(),
        nn.Linear(channels_in * side * side, 512), nn.ReLU(), nn.Linear(512, ACTIONS),
    )


def time_network(build) -> dict[str, float]:
    """Seconds of one gradient step (online forward and backward on BATCH states, target
    forward on BATCH states, an Adam step) and of one acting pass (a single state)."""
    torch.manual_seed(0)
    online, target = build(), build()
    optimizer = torch.optim.Adam(online.parameters(), lr=5e-5, eps=3.125e-4)
    states = torch.rand(BATCH, 4, 84, 84)
    following = torch.rand(BATCH, 4, 84, 84)
    one = torch.rand(1, 4, 84, 84)

    def step() -> None:
        with torch.no_grad():
            goal = target(following).max(dim=1).values
        loss = (online(states)[:, 0] - goal).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def act() -> None:
        with torch.no_grad():
            online(one).argmax()

    step()
    act()  # first calls set up the kernels
    steps, acts = [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(REPEATS):
            step()
        steps.append((time.perf_counter() - start) / REPEATS)
        start = time.perf_counter()
        for _ in range(REPEATS * UPDATE_PERIOD):
            act()
        acts.append((time.perf_counter() - start) / (REPEATS * UPDATE_PERIOD))
    update = min(steps)
    acting = min(acts)
    per_env_step = update / UPDATE_PERIOD + acting
    hours = ENV_STEPS * per_env_step / 3600
    return {
        "parameters": sum(p.numel() for p in online.parameters()),
        "gradient_step_s": [round(s, 5) for s in steps],
        "acting_pass_s": [round(s, 6) for s in acts],
        "network_s_per_env_step": round(per_env_step, 6),
        "hours_for_env_steps_one_core": round(hours, 1),
        "hours_for_env_steps_two_cores": round(hours / 2, 1),
    }


def main() -> None:
    """Time both networks on one thread; print one JSON object."""
    torch.set_num_threads(1)
    print(json.dumps({
        "what": "network work of a replay learner (DQN form) on one thread, and the hours "
                "12.11 M env steps would take for it alone",
        "command": "PYTHONPATH=.torch python docs/bench/replay_cost.py",
        "date": date.today().isoformat(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "batch": BATCH,
        "update_period": UPDATE_PERIOD,
        "env_steps": ENV_STEPS,
        "nature": time_network(nature),
        "impala": time_network(impala),
    }, indent=1))


if __name__ == "__main__":
    main()
