"""The conv policy's work per env step: pong-mp's compiled sparse loops against PyTorch.

Whether a CPU deep-learning framework would do a worker's job faster than pong-mp's own
loops: this measures it, for the two things a worker computes:

- a gradient pass of the actor-critic (the clipped surrogate, the value loss and the
  entropy term, summed over a minibatch's steps): pong-mp's `ppo.epoch_pass` against
  the same objective written in PyTorch (dense conv2d and matmuls, autograd), fed the same
  steps; PyTorch's time includes turning the stored sparse inputs into dense 80x80 planes,
  which it needs and pong-mp does not, and is also given without it;
- the forward pass of one step while playing (logit and value), batch 1.

Both run on one thread, as a worker does (numpy pinned by threadpoolctl, torch by
`torch.set_num_threads(1)`), one after the other in this process. The gradients are checked
against each other first (largest difference relative to the largest entry), so the two
compute the same thing. The policy is models/pong.npz (16 channels, 200 hidden units) with a
value head drawn from a fixed seed; the steps come from games it plays on pong-mp's fast
ALE/Pong-v5, so their inputs are as sparse as a trained agent's.

PyTorch is not a dependency of pong-mp; install it into `.torch/` in the checkout (ignored
by git) and run this from the checkout:

    pip install --target .torch torch
    PYTHONPATH=.torch python docs/bench/torch_compare.py models/pong.npz \
        > docs/bench/2026-11-26-torch-compare.json
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from pong_mp import policy, ppo
from pong_mp.backends.base import RolloutSpec
from pong_mp.backends.episode_worker import EpisodeWorker
from pong_mp.checkpoint import load_policy, stored_shape
from pong_mp.episode import make_tasks
from pong_mp.gradient import Moments

GAMES = 2
"""Games played for the steps (a trained agent's game is 3,000 to 6,000 steps)."""
MINIBATCHES = 16
"""Minibatches a pass, as the defaults (`--minibatches`)."""
ROUNDS = 3
"""Passes timed for each side; the fastest is reported, the others show the spread."""
ENTROPY = -0.1
"""The entropy's weight late in a default run (a penalty)."""
PLAY_STEPS = 2000
"""Steps of batch-1 forward passes timed for play."""


def load_weights(model: str, seed: int = 0) -> policy.Weights32:
    """The float32 weights of a conv policy's model file or checkpoint, with a value head
    drawn from `seed` (an exported agent has none)."""
    params, config = load_policy(Path(model))
    shape = stored_shape(config)
    flat = policy.with_value_head(params, shape, True)
    head = policy.value_head(flat, shape)
    head[:] = np.random.default_rng(seed).normal(0.0, 0.05, shape.hidden + 1)
    return policy.Weights32.from_params(flat, shape)


class TorchPolicy(torch.nn.Module):
    """The conv policy in PyTorch: conv 8x8 stride 4 without bias, relu, a hidden layer of
    relus without bias, the logit of UP and the value (with its bias) on it."""

    def __init__(self, weights: policy.Weights32) -> None:
        """Copies of `weights`, as PyTorch parameters."""
        super().__init__()
        kernel = np.ascontiguousarray(weights.kernel.transpose(2, 0, 1)[:, None])
        self.kernel = torch.nn.Parameter(torch.from_numpy(kernel))
        self.w1t = torch.nn.Parameter(torch.from_numpy(weights.w1t.copy()))
        self.w2 = torch.nn.Parameter(torch.from_numpy(weights.w2.copy()))
        self.value = torch.nn.Parameter(torch.from_numpy(weights.value.copy()))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and values of a batch of (n, 1, 80, 80) inputs."""
        maps = torch.relu(torch.nn.functional.conv2d(x, self.kernel, stride=policy.CONV_STRIDE))
        # pong-mp's feature order: (row * side + column) * channels + channel.
        features = maps.permute(0, 2, 3, 1).reshape(len(x), -1)
        h = torch.relu(features @ self.w1t)
        return h @ self.w2, h @ self.value[:-1] + self.value[-1]

    def flat_grad(self) -> np.ndarray:
        """The gradients in pong-mp's flat layout (W1 transposed, W2, value head, filters)."""
        kernel = self.kernel.grad[:, 0].permute(1, 2, 0)
        parts = (self.w1t.grad, self.w2.grad, self.value.grad, kernel)
        return np.concatenate([p.detach().numpy().ravel() for p in parts])


def dense(trajectory: ppo.Trajectory, steps: np.ndarray) -> torch.Tensor:
    """The steps' inputs as dense (n, 1, 80, 80) float32 planes."""
    pixels, values, indptr = trajectory.inputs(steps)
    x = np.zeros((len(steps), 80 * 80), np.float32)
    rows = np.repeat(np.arange(len(steps)), np.diff(indptr))
    x[rows, pixels] = values
    return torch.from_numpy(x).reshape(len(steps), 1, 80, 80)


def objective(
    net: TorchPolicy, x: torch.Tensor, trajectory: ppo.Trajectory, steps: np.ndarray,
    mean: float, scale: float, settings: ppo.PPOSettings,
) -> torch.Tensor:
    """The actor-critic's objective summed over the steps (`sparse.ppo_coefficients`'s)."""
    logits, values = net(x)
    logits, values = logits.double(), values.double()
    up = torch.from_numpy(trajectory.actions[steps] == 1)
    logp = torch.where(up, -torch.nn.functional.softplus(-logits),
                       -torch.nn.functional.softplus(logits))
    ratio = torch.exp(logp - torch.from_numpy(trajectory.logp_old[steps]))
    adv = torch.from_numpy((trajectory.advantages[steps] - mean) * scale)
    clipped = torch.clamp(ratio, 1.0 - settings.clip, 1.0 + settings.clip)
    surrogate = torch.minimum(ratio * adv, clipped * adv)
    p = torch.sigmoid(logits)
    entropy = p * torch.nn.functional.softplus(-logits) + (1 - p) * torch.nn.functional.softplus(
        logits
    )
    error = values - torch.from_numpy(trajectory.returns[steps])
    return (surrogate - settings.value_coef / 2 * error**2 + ENTROPY * entropy).sum()


def main(model: str) -> None:
    """Play the games, check the gradients agree, time both sides; print one JSON object."""
    torch.set_num_threads(1)
    weights = load_weights(model)
    settings = ppo.PPOSettings()
    shape = weights.shape
    spec = RolloutSpec("ALE/Pong-v5", shape, ppo.PPOWork(policy.GAMMA, settings))
    worker = EpisodeWorker(spec)
    worker.open()
    try:
        tasks = make_tasks(20000, 0, GAMES)
        played = [worker.play(weights, task).stats.data for task in tasks]
    finally:
        worker.close()
    episodes = [(t.index, t.seed, trajectory) for t, trajectory in zip(tasks, played, strict=True)]
    moments = Moments()
    for _, _, trajectory in episodes:
        moments.merge(ppo.advantage_moments(trajectory))
    mean, scale = moments.mean, moments.standardizing_scale
    steps_total = sum(t.steps for _, _, t in episodes)
    work = ppo.PassWork(shape)
    out = np.empty(policy.param_count(shape, True), np.float32)
    net = TorchPolicy(weights)

    def task(index: int, seed: int, trajectory: ppo.Trajectory, part: int) -> ppo.EpochTask:
        return ppo.EpochTask(
            index, seed, trajectory, 0, part, MINIBATCHES, mean, scale, ENTROPY
        )

    def minibatches():
        for index, seed, trajectory in episodes:
            for part in range(MINIBATCHES):
                yield index, seed, trajectory, part

    # The same gradient, both ways, for one episode's first minibatch.
    index, seed, trajectory = episodes[0]
    steps = ppo.minibatch_steps(seed, 0, trajectory.steps, MINIBATCHES, 0)
    with threadpool_limits(1):
        ppo.epoch_pass(weights, task(index, seed, trajectory, 0), settings, out, work)
    net.zero_grad()
    objective(net, dense(trajectory, steps), trajectory, steps, mean, scale, settings).backward()
    theirs = net.flat_grad()
    difference = float(np.abs(theirs - out).max() / np.abs(out).max())

    def time_pong_mp() -> float:
        start = time.perf_counter()
        for index, seed, trajectory, part in minibatches():
            ppo.epoch_pass(weights, task(index, seed, trajectory, part), settings, out, work)
        return time.perf_counter() - start

    def time_torch(densify_only: bool = False) -> float:
        start = time.perf_counter()
        for _, seed, trajectory, part in minibatches():
            steps = ppo.minibatch_steps(seed, 0, trajectory.steps, MINIBATCHES, part)
            x = dense(trajectory, steps)
            if densify_only:
                continue
            net.zero_grad()
            objective(net, x, trajectory, steps, mean, scale, settings).backward()
        return time.perf_counter() - start

    with threadpool_limits(1):
        ours = [time_pong_mp() for _ in range(ROUNDS)]
        torch_passes = [time_torch() for _ in range(ROUNDS)]
        densify = [time_torch(densify_only=True) for _ in range(ROUNDS)]
        play_ours, play_torch = time_play(weights, net, episodes[0][2])

    def per_step(seconds: list[float]) -> list[float]:
        return [round(s / steps_total * 1e6, 2) for s in seconds]

    pass_ours, pass_torch, pass_dense = per_step(ours), per_step(torch_passes), per_step(densify)
    print(json.dumps({
        "what": "us per env step, one thread: a gradient pass, and a forward pass in play",
        "command": "PYTHONPATH=.torch python docs/bench/torch_compare.py " + model,
        "date": date.today().isoformat(),
        "machine": cpu_model(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "games": GAMES,
        "steps": steps_total,
        "minibatches": MINIBATCHES,
        "gradient_max_difference_relative": difference,
        "pass_us_per_step": {
            "pong_mp": pass_ours,
            "torch": pass_torch,
            "torch_densify_only": pass_dense,
        },
        "pass_torch_over_pong_mp": round(min(torch_passes) / min(ours), 2),
        "pass_torch_without_densify_over_pong_mp": round(
            (min(torch_passes) - min(densify)) / min(ours), 2
        ),
        "play_us_per_step": {"pong_mp": play_ours, "torch": play_torch},
        "play_torch_over_pong_mp": round(play_torch / play_ours, 2),
    }, indent=1))


def cpu_model() -> str:
    """The CPU's model name (Linux), or the machine type."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def time_play(
    weights: policy.Weights32, net: TorchPolicy, trajectory: ppo.Trajectory
) -> tuple[float, float]:
    """Microseconds a step of batch-1 forward passes (logit and value) take: pong-mp's
    compiled sparse step, and PyTorch's on the dense plane (made each step, as a player
    must)."""
    count = min(PLAY_STEPS, trajectory.steps)
    inputs = [trajectory.inputs(np.array([t])) for t in range(count)]
    recorder = ppo.TrajectoryRecorder(weights.shape)
    recorder.start(weights)
    start = time.perf_counter()
    for pixels, values, _ in inputs:
        recorder.forward(pixels, values)
    ours = (time.perf_counter() - start) / count * 1e6
    x = np.zeros((1, 1, 80, 80), np.float32)
    flat_x = x.reshape(-1)
    tensor = torch.from_numpy(x)
    start = time.perf_counter()
    with torch.no_grad():
        for pixels, values, _ in inputs:
            flat_x[:] = 0.0
            flat_x[pixels] = values
            net(tensor)
    theirs = (time.perf_counter() - start) / count * 1e6
    return round(ours, 2), round(theirs, 2)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "models/pong.npz")
