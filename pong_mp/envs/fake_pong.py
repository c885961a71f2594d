"""FakePong: a tiny pure-numpy Pong with ALE Pong's interface, for tests and CI
(docs/how-it-works.md, 'FakePong-v0'; actions 0, 1, 4 and 5 hold still).

Frames are laid out like ALE's: the play field spans rows 34-193, the background's red value
is 144 (erased by preprocessing), the agent's green paddle is on the right, the opponent's
orange paddle on the left, and the white ball survives preprocessing.

Speed matters more than fidelity: only the objects that moved are redrawn on a persistent
canvas, each step returns a copy of it, and the hot path avoids numpy scalar calls.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from pong_mp.envs.registry import PONG_POINTS

BACKGROUND = np.array([144, 72, 17], dtype=np.uint8)
WALL = np.array([236, 236, 236], dtype=np.uint8)
BALL = WALL
AGENT = np.array([92, 186, 92], dtype=np.uint8)
OPPONENT = np.array([213, 130, 74], dtype=np.uint8)

TOP, BOTTOM = 34, 194  # play field rows [TOP, BOTTOM)
WIDTH = 160
PADDLE_H, PADDLE_W = 16, 4
BALL_H, BALL_W = 4, 2
AGENT_X, OPPONENT_X = 140, 16
PADDLE_SPEED = 6
BALL_VX = 4
SLEEP_AT_LEAST = 0.02
"""With step_seconds, steps sleep once this much of their time is owed. A process that
sleeps wakes up with its caches cold: on a 2-core VM that costs about 0.4 ms of CPU a
wake-up, several times the step's own work (docs/bench/sleep_cost.py). One wake-up in 20 ms
rather than one a step leaves the CPUs to the orchestration that the simulation measures."""


class FakePong(gym.Env):
    """A small deterministic Pong whose imperfect opponent can be beaten."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        points_to_win: int = PONG_POINTS,
        opponent_speed: int = 3,
        opponent_error: int = 8,
        max_steps: int = 27_000,
        paddle_height: int = PADDLE_H,
        ball_size: int = BALL_H,
        fixed_serve: bool = False,
        step_seconds: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        """`opponent_speed` caps how fast the opponent moves (px/step); `opponent_error` is
        the largest offset (px) of where it aims, redrawn each rally, so it misses at times.
        `max_steps` truncates endless rallies. `paddle_height` and `ball_size` (its height;
        it is half as wide) default to ALE's; bigger ones make learning quicker (for CI).
        `fixed_serve` starts every rally the same way, so that a policy learns to return the
        serve in minutes. `step_seconds` makes each step take that long more, slept (in
        runs of SLEEP_AT_LEAST, and at the game's end): a slow emulator that costs no CPU, to
        simulate many workers on a few cores."""
        if points_to_win < 1:
            raise ValueError("points_to_win must be >= 1")
        if not 0.0 <= step_seconds <= 1.0:
            raise ValueError("step_seconds must be in [0, 1]")
        self.step_seconds = step_seconds
        self._owed = 0.0  # seconds of steps not slept yet
        if not 2 <= paddle_height <= 80 or not 2 <= ball_size <= 16:
            raise ValueError("paddle_height must be in [2, 80] and ball_size in [2, 16]")
        self.paddle_h = paddle_height
        self.fixed_serve = fixed_serve
        self.ball_h, self.ball_w = ball_size, max(2, ball_size // 2)
        self.points_to_win = points_to_win
        self.opponent_speed = opponent_speed
        self.opponent_error = opponent_error
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(6)
        self._canvas = np.empty((210, 160, 3), dtype=np.uint8)
        self._drawn: dict[str, tuple[int, int, int, int]] = {}

    # -- game state -------------------------------------------------------------------------

    def _serve(self, towards_agent: bool) -> None:
        rng = self.np_random
        self.ball_x = WIDTH // 2 - self.ball_w // 2
        self.aim_error = int(rng.integers(-self.opponent_error, self.opponent_error + 1))
        if self.fixed_serve:
            self.agent_y = self.opponent_y = (TOP + BOTTOM - self.paddle_h) // 2
            self.ball_y = (TOP + BOTTOM - self.ball_h) // 2
            self.ball_vx, self.ball_vy = BALL_VX, 2
            return
        self.ball_y = int(rng.integers(TOP + 20, BOTTOM - 20 - self.ball_h))
        self.ball_vx = BALL_VX if towards_agent else -BALL_VX
        self.ball_vy = int(rng.choice([-3, -2, -1, 1, 2, 3]))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new game; the same seed gives the same game for the same actions."""
        super().reset(seed=seed)
        self.agent_y = self.opponent_y = (TOP + BOTTOM - self.paddle_h) // 2
        self.score = [0, 0]  # agent, opponent
        self.steps = 0
        self._serve(towards_agent=bool(self.np_random.integers(2)))
        self._canvas[:] = BACKGROUND
        self._canvas[24:TOP] = WALL
        self._canvas[BOTTOM:] = WALL
        self._drawn = {}
        self._draw()
        return self._canvas.copy(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move the paddles and the ball by one step; reward +1/-1 when a point is scored."""
        self._owed += self.step_seconds
        if self._owed >= SLEEP_AT_LEAST:
            self._sleep()
        self.steps += 1
        if action in (2, 4):
            self.agent_y = max(TOP, self.agent_y - PADDLE_SPEED)
        elif action in (3, 5):
            self.agent_y = min(BOTTOM - self.paddle_h, self.agent_y + PADDLE_SPEED)
        self._move_opponent()
        reward = self._move_ball()
        terminated = max(self.score) >= self.points_to_win
        truncated = not terminated and self.steps >= self.max_steps
        if (terminated or truncated) and self._owed > 0.0:
            self._sleep()  # a game takes all of its steps' time
        self._draw()
        return self._canvas.copy(), reward, terminated, truncated, {}

    def _sleep(self) -> None:
        # What a sleep overshoots is taken off the next one: the steps' time stays exact.
        start = time.perf_counter()
        time.sleep(self._owed)
        self._owed -= time.perf_counter() - start

    def _move_opponent(self) -> None:
        # It reacts only once the ball comes its way past midfield, aiming off by a per-rally
        # error, so angled returns beat it; otherwise it drifts back to the centre.
        if self.ball_vx < 0 and self.ball_x < WIDTH // 2:
            target = self.ball_y + self.ball_h // 2 + self.aim_error - self.paddle_h // 2
        else:
            target = (TOP + BOTTOM - self.paddle_h) // 2
        delta = _clamp(target - self.opponent_y, -self.opponent_speed, self.opponent_speed)
        self.opponent_y = _clamp(self.opponent_y + delta, TOP, BOTTOM - self.paddle_h)

    def _move_ball(self) -> float:
        x, y = self.ball_x + self.ball_vx, self.ball_y + self.ball_vy
        if y < TOP:
            y, self.ball_vy = 2 * TOP - y, -self.ball_vy
        elif y > BOTTOM - self.ball_h:
            y, self.ball_vy = 2 * (BOTTOM - self.ball_h) - y, -self.ball_vy
        crosses_agent = self.ball_vx > 0 and self.ball_x + self.ball_w <= AGENT_X < x + self.ball_w
        crosses_opponent = self.ball_vx < 0 and x < OPPONENT_X + PADDLE_W <= self.ball_x
        if crosses_agent and self._hits(self.agent_y, y):
            x = AGENT_X - self.ball_w
            self._bounce(self.agent_y, y)
        elif crosses_opponent and self._hits(self.opponent_y, y):
            x = OPPONENT_X + PADDLE_W
            self._bounce(self.opponent_y, y)
            self.aim_error = int(
                self.np_random.integers(-self.opponent_error, self.opponent_error + 1)
            )
        self.ball_x, self.ball_y = x, y
        if x >= WIDTH:
            return self._point(agent_scored=False)
        if x + self.ball_w <= 0:
            return self._point(agent_scored=True)
        return 0.0

    def _hits(self, paddle_y: int, ball_y: int) -> bool:
        return paddle_y - self.ball_h < ball_y < paddle_y + self.paddle_h

    def _bounce(self, paddle_y: int, ball_y: int) -> None:
        # The further from the paddle's centre, the steeper the return, as in Pong.
        offset = (ball_y + self.ball_h / 2) - (paddle_y + self.paddle_h / 2)
        self.ball_vx = -self.ball_vx
        spin = int(self.np_random.integers(-1, 2))  # a little chaos, so rallies end
        self.ball_vy = _clamp(round(offset / 3) + spin, -4, 4) or int(
            self.np_random.choice([-1, 1])
        )

    def _point(self, agent_scored: bool) -> float:
        self.score[0 if agent_scored else 1] += 1
        self._serve(towards_agent=agent_scored)
        return 1.0 if agent_scored else -1.0

    # -- drawing ----------------------------------------------------------------------------

    def _draw(self) -> None:
        canvas = self._canvas
        old_ball = self._drawn.pop("ball", None)
        if old_ball is not None:
            canvas[old_ball[0] : old_ball[1], old_ball[2] : old_ball[3]] = BACKGROUND
        paddles = (
            ("agent", self.agent_y, AGENT_X, AGENT),
            ("opponent", self.opponent_y, OPPONENT_X, OPPONENT),
        )
        for name, y, x, colour in paddles:
            rect = (y, y + self.paddle_h, x, x + PADDLE_W)
            old = self._drawn.get(name)
            # Erasing the ball may have cut into a paddle that did not move: redraw it then.
            if old == rect and not (old_ball and _overlap(old, old_ball)):
                continue
            if old is not None:
                canvas[old[0] : old[1], old[2] : old[3]] = BACKGROUND
            canvas[rect[0] : rect[1], rect[2] : rect[3]] = colour
            self._drawn[name] = rect
        x0, x1 = max(self.ball_x, 0), min(self.ball_x + self.ball_w, WIDTH)
        if x0 < x1:  # drawn last, so it shows on top of a paddle it overlaps
            canvas[self.ball_y : self.ball_y + self.ball_h, x0:x1] = BALL
            self._drawn["ball"] = (self.ball_y, self.ball_y + self.ball_h, x0, x1)

    def render(self) -> np.ndarray | None:
        """The current frame as RGB, in render mode "rgb_array"."""
        return self._canvas.copy() if self.render_mode == "rgb_array" else None


def _clamp(value: int, low: int, high: int) -> int:
    return low if value < low else high if value > high else value


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
