"""Making envs by id."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

import pong_mp  # noqa: F401  (registers FakePong-v0)
from pong_mp.envs import UnknownEnvError, check_env, check_env_id, is_pong, make_env
from tests.fault_envs import SLOW_PONG


def test_importing_pong_mp_registers_fake_pong() -> None:
    assert "FakePong-v0" in gym.registry
    env = gym.make("FakePong-v0", points_to_win=7)
    assert env.unwrapped.points_to_win == 7


def test_unknown_env_id_is_a_short_clear_error() -> None:
    with pytest.raises(UnknownEnvError, match="unknown env id 'Nope-v0'"):
        make_env("Nope-v0")
    with pytest.raises(UnknownEnvError):
        check_env_id("ALE/NoSuchGame-v5")


def test_the_package_registers_no_fault_env() -> None:
    registered = subprocess.run(
        [sys.executable, "-c", "import gymnasium, pong_mp; print(sorted(gymnasium.registry))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "'FakePong-v0'" in registered
    assert "SlowPong" not in registered and "CrashingPong" not in registered


def test_an_env_named_with_its_module_is_the_users_word() -> None:
    # The tests' fault envs are Pong to pong-mp only by their module path ("module:EnvId").
    check_env(SLOW_PONG, {"delay": 0.0})
    assert not is_pong(SLOW_PONG) and not is_pong("SlowPong-v0")
    with pytest.raises(UnknownEnvError, match="SlowPong-v0 is not Pong"):
        check_env("SlowPong-v0", {})
    with pytest.raises(UnknownEnvError, match="cannot import no_such_module"):
        check_env_id("no_such_module:Pong-v0")
    with pytest.raises(UnknownEnvError, match=r"unknown env id 'tests\.fault_envs:Nope-v0'"):
        check_env_id("tests.fault_envs:Nope-v0")


@pytest.mark.ale
def test_real_pong_is_made_with_v5_settings() -> None:
    env = make_env("ALE/Pong-v5")
    try:
        assert env.spec.kwargs["frameskip"] == 4
        assert env.spec.kwargs["repeat_action_probability"] == 0.25
        assert env.unwrapped.get_action_meanings()[2:4] == ["RIGHT", "LEFT"]
    finally:
        env.close()


@pytest.mark.ale
@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"full_action_space": True}, "its actions 2 and 3 are UP and RIGHT, not Pong's paddle"),
        ({"fast": False, "full_action_space": True}, "its actions 2 and 3 are UP and RIGHT"),
        ({"obs_type": "ram"}, "obs_type is pong-mp's: it reads the screen itself"),
        ({"fast": False, "obs_type": "ram"}, "its observations are (128,), not the RGB frames"),
        ({"fast": False, "obs_type": "grayscale"}, "its observations are (210, 160), not the"),
    ],
)
def test_ale_arguments_that_change_pongs_frames_or_actions_are_refused(
    kwargs: dict[str, object], says: str
) -> None:
    # Each trained without a word: the paddle moving one way only (UP does nothing in Pong),
    # or a traceback in the first step's frame.
    with pytest.raises(UnknownEnvError) as refused:
        check_env("ALE/Pong-v5", kwargs)
    assert str(refused.value).startswith("ALE/Pong-v5 cannot be made with ")
    assert says in str(refused.value)
    check_env("ALE/Pong-v5", {"difficulty": 1})  # what keeps Pong's frames and moves is taken
