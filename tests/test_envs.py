"""Making envs by id."""

from __future__ import annotations

import gymnasium as gym
import pytest

import pong_mp  # noqa: F401  (registers FakePong-v0)
from pong_mp.envs import UnknownEnvError, check_env_id, make_env


def test_importing_pong_mp_registers_fake_pong() -> None:
    assert "FakePong-v0" in gym.registry
    env = gym.make("FakePong-v0", points_to_win=7)
    assert env.unwrapped.points_to_win == 7


def test_unknown_env_id_is_a_short_clear_error() -> None:
    with pytest.raises(UnknownEnvError, match="unknown env id 'Nope-v0'"):
        make_env("Nope-v0")
    with pytest.raises(UnknownEnvError):
        check_env_id("ALE/NoSuchGame-v5")


@pytest.mark.ale
def test_real_pong_is_made_with_v5_settings() -> None:
    env = make_env("ALE/Pong-v5")
    try:
        assert env.spec.kwargs["frameskip"] == 4
        assert env.spec.kwargs["repeat_action_probability"] == 0.25
        assert env.unwrapped.get_action_meanings()[2:4] == ["RIGHT", "LEFT"]
    finally:
        env.close()
