"""ALE games driven directly, with ALE v5's semantics, for fast and reproducible training.

Gymnasium's `ALE/Pong-v5` applies a new seed by reloading the ROM (~90 ms, a third of a
random-play episode) because the seed drives ALE's sticky actions. `FastAtari` runs the
emulator with sticky actions off and applies them itself, frame by frame as ALE does, from a
generator seeded at reset. Pong is deterministic, so an episode is a function of its seed.

Observations are palette indices, not a 100 KB RGB image; `binary` turns them into
`frames.binarize`'s 0/1 pixels through a table learned from ALE's own RGB conversion, so the
frames are gymnasium's. Tests check both claims against gymnasium's env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from pong_mp import frames
from pong_mp.envs.registry import make_env

_UNKNOWN = 255  # table entry of a palette index not seen yet


class FastAtari(gym.Env):
    """An ALE game with v5 semantics whose observations are palette-index crops."""

    def __init__(
        self,
        env_id: str,
        frameskip: int = 4,
        repeat_action_probability: float = 0.25,
        **kwargs: Any,
    ) -> None:
        """Drive `env_id` (an ALE/...-v5 id); other arguments go to make_env."""
        if not isinstance(frameskip, int) or frameskip < 1:
            raise ValueError("frameskip must be a positive int")
        if not 0.0 <= repeat_action_probability <= 1.0:
            raise ValueError("repeat_action_probability must be in [0, 1]")
        if "obs_type" in kwargs:
            raise ValueError("obs_type is pong-mp's: it reads the screen itself; leave it out")
        self._inner = make_env(
            env_id, frameskip=1, repeat_action_probability=0.0, obs_type="ram", **kwargs
        )
        self._inner.reset(seed=0)  # loads the ROM, once
        self._ale = self._inner.unwrapped.ale
        self._actions = list(self._inner.unwrapped._action_set)
        self.frameskip = frameskip
        self.sticky = repeat_action_probability
        self.action_space = gym.spaces.Discrete(len(self._actions))
        self.observation_space = gym.spaces.Box(0, 255, (80, 80), np.uint8)
        self._screen = np.empty((210, 160), dtype=np.uint8)
        self._crop = self._screen[35:195:2, ::2]
        self._table = np.full(256, _UNKNOWN, dtype=np.uint8)
        self._previous = self._actions[0]  # ALE starts every game from NOOP

    def get_action_meanings(self) -> list[str]:
        """The actions' names, as ALE's env gives them (Pong's: NOOP, FIRE, RIGHT, LEFT, ...)."""
        return list(self._inner.unwrapped.get_action_meanings())

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Restart the game (no ROM reload); the seed drives the sticky actions."""
        super().reset(seed=seed)
        self._ale.reset_game()
        self._previous = self._actions[0]
        return self._frame(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Play `frameskip` frames; each keeps the previous action with the sticky chance."""
        wanted = self._actions[action]
        reward = 0.0
        draws = self.np_random.random(self.frameskip) if self.sticky > 0 else None
        for i in range(self.frameskip):
            if draws is None or draws[i] >= self.sticky:
                self._previous = wanted
            reward += self._ale.act(self._previous)
        terminated = self._ale.game_over(with_truncation=False)
        truncated = self._ale.game_truncated()
        return self._frame(), reward, terminated, truncated, {}

    def _frame(self) -> np.ndarray:
        self._ale.getScreen(self._screen)
        return self._crop.copy()

    def binary(self, indices: np.ndarray) -> np.ndarray:
        """The 0/1 pixels (uint8) of palette `indices` taken from the current screen (an index
        seen for the first time is learned from it)."""
        pixels = self._table[indices]
        if pixels.size and pixels.max() == _UNKNOWN:
            red = self._ale.getScreenRGB()[35:195:2, ::2, 0]
            for index in np.unique(indices[pixels == _UNKNOWN]):
                values = np.unique(red[self._crop == index])
                if len(values) != 1:  # a palette maps an index to one colour; never guess
                    raise RuntimeError(f"palette index {index} shows red values {values}")
                self._table[index] = 0 if int(values[0]) in frames.ERASED else 1
            pixels = self._table[indices]
        return pixels

    def render(self) -> np.ndarray:
        """The current frame as RGB (for recording)."""
        return self._ale.getScreenRGB()

    def close(self) -> None:
        """Close the emulator."""
        self._inner.close()
