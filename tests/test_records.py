"""The commands of docs/runs/README.md make the runs their committed records describe."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pong_mp import cli
from pong_mp.config import ALGORITHM_FIELDS, TrainConfig, idle_drop_values, read_config

RUNS = Path(__file__).resolve().parent.parent / "docs" / "runs"


def _train_commands() -> list[str]:
    # Each `bin/pong-mp train` line of the README's bash blocks that starts a run of its own:
    # not a resume or a fork (they take the stored options), not a line with shell variables,
    # not a block run with an older commit and its defaults.
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", (RUNS / "README.md").read_text(), re.S):
        if "git checkout" in block:
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("bin/pong-mp train") and not re.search(
                r"\$|--resume|--fork-from|runs/NAME", line
            ):
                commands.append(line)
    return commands


COMMANDS = _train_commands()

ACTOR_CRITIC_ONLY = ("epochs", "minibatches", "clip", "gae_lambda", "value_coef", "max_grad_norm")
"""Options that Karpathy's learner (--algo pg) stores but does not use."""


class _Given(Exception):
    def __init__(self, given: dict[str, Any]) -> None:
        self.given = given


def _options_of(command: str, monkeypatch: pytest.MonkeyPatch) -> TrainConfig:
    # The train command as far as the options it settles on, stopped before a run starts.
    def capture(run_dir: Path, resume: bool, given: dict[str, Any]) -> Any:
        raise _Given(given)

    monkeypatch.setattr(cli, "open_run", capture)
    result = CliRunner().invoke(cli.main, shlex.split(command)[1:])
    assert isinstance(result.exception, _Given), result.output
    fields = TrainConfig.__dataclass_fields__
    return TrainConfig(**{k: v for k, v in result.exception.given.items() if k in fields})


def test_the_readme_has_the_commands_of_the_records() -> None:
    assert len(COMMANDS) >= 15
    assert any("conv-mb16-s3" in command for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.split("runs/")[-1].split()[0])
def test_a_records_command_makes_its_options(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = command.split("--run-dir runs/")[1].split()[0]
    records = [path.parent for path in RUNS.rglob("config.json") if path.parent.name == name]
    assert len(records) == 1, f"no single record named {name}"
    stored = read_config(records[0] / "config.json")
    made = _options_of(command, monkeypatch)
    unused = ACTOR_CRITIC_ONLY if stored.algo == "pg" else ()
    unused += idle_drop_values(dataclasses.asdict(stored))  # the defaults' values changed
    differ = {
        field: (getattr(made, field), getattr(stored, field))
        for field in ALGORITHM_FIELDS
        if field not in ("fork_from", *unused) and getattr(made, field) != getattr(stored, field)
    }
    assert not differ, f"{name}: the command gives (its value, the record's) {differ}"
