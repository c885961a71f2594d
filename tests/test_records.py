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


def _train_lines() -> list[str]:
    # Each `bin/pong-mp train` line of the README's bash blocks, without a line with shell
    # variables or a placeholder, or a block run with an older commit and its defaults.
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", (RUNS / "README.md").read_text(), re.S):
        if "git checkout" in block:
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("bin/pong-mp train") and not re.search(r"\$|runs/NAME", line):
                lines.append(line)
    return lines


_LINES = _train_lines()

COMMANDS = [line for line in _LINES if not re.search(r"--resume|--fork-from", line)]
"""The commands that start a run of their own (a resume takes the stored options)."""

FORKS = [line for line in _LINES if "--fork-from" in line]
"""The commands that fork a record: they take its options, then the ones they type."""

ACTOR_CRITIC_ONLY = ("epochs", "minibatches")
"""Options that Karpathy's learner (--algo pg) stores but does not use."""


class _Given(Exception):
    def __init__(self, given: dict[str, Any]) -> None:
        self.given = given


def _given_of(command: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # The options the train command hands over to open the run, stopped before a run starts.
    def capture(run_dir: Path, resume: bool, given: dict[str, Any]) -> Any:
        raise _Given(given)

    monkeypatch.setattr(cli, "open_run", capture)
    result = CliRunner().invoke(cli.main, shlex.split(command)[1:])
    assert isinstance(result.exception, _Given), result.output
    return result.exception.given


def _config(options: dict[str, Any]) -> TrainConfig:
    fields = TrainConfig.__dataclass_fields__
    return TrainConfig(**{k: v for k, v in options.items() if k in fields})


def _record(name: str) -> TrainConfig:
    records = [path for path in RUNS.rglob("config.json") if path.parent.name == name]
    assert len(records) == 1, f"no single record named {name}"
    return read_config(records[0])


def _run_dir_of(command: str, flag: str = "--run-dir") -> str:
    return command.split(f"{flag} runs/")[1].split()[0]


def _differences(made: TrainConfig, stored: TrainConfig) -> dict[str, tuple[Any, Any]]:
    # The algorithm's options where the command and the record differ, but for those the
    # record's learner does not use and a drop's values where it has no points.
    unused = ACTOR_CRITIC_ONLY if stored.algo == "pg" else ()
    unused += idle_drop_values(dataclasses.asdict(stored))  # the defaults' values changed
    return {
        field: (getattr(made, field), getattr(stored, field))
        for field in ALGORITHM_FIELDS
        if field not in ("fork_from", *unused) and getattr(made, field) != getattr(stored, field)
    }


def test_the_readme_has_the_commands_of_the_records() -> None:
    assert len(COMMANDS) >= 15
    assert any("conv-mb16-s3" in command for command in COMMANDS)
    assert len(FORKS) >= 20


@pytest.mark.parametrize("command", COMMANDS, ids=_run_dir_of)
def test_a_records_command_makes_its_options(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _run_dir_of(command)
    differ = _differences(_config(_given_of(command, monkeypatch)), _record(name))
    assert not differ, f"{name}: the command gives (its value, the record's) {differ}"


@pytest.mark.parametrize("command", FORKS, ids=_run_dir_of)
def test_a_forks_command_makes_its_options(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fork keeps the algorithm of the record it starts from but for the options it types,
    # so a chain of forks is checked link by link.
    name, source = _run_dir_of(command), _run_dir_of(command, "--fork-from")
    stored = _record(name)
    made = _config({**dataclasses.asdict(_record(source)), **_given_of(command, monkeypatch)})
    differ = _differences(made, stored)
    assert not differ, f"{name}: the fork gives (its value, the record's) {differ}"
    assert stored.fork_from is not None and Path(stored.fork_from).name == source
