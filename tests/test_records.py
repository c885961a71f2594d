"""The commands of docs/runs/README.md make the runs their committed records describe."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pong_mp import cli
from pong_mp.config import (
    ALGORITHM_FIELDS,
    REMOVED,
    ConfigError,
    TrainConfig,
    idle_drop_values,
    read_config,
)
from pong_mp.rundir import METRICS_FILE, PACKED_METRICS_FILE, metrics_file, read_metrics
from pong_mp.tools.plot import milestones

RUNS = Path(__file__).resolve().parent.parent / "docs" / "runs"


def reward_at_minutes(records: list[dict[str, Any]], minutes: float) -> float | None:
    """The running reward of the last update done within `minutes` of `elapsed` (or None)."""
    done = [r for r in records if r.get("elapsed", math.inf) <= minutes * 60]
    return done[-1]["running_reward"] if done else None


def training_rate(records: list[dict[str, Any]]) -> float:
    """A timed run's env steps over its wall time, end to end (docs/learning.md's rates)."""
    last = records[-1]
    return last["total_steps"] / last["elapsed"]


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
def test_a_records_command_makes_its_options(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
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


# -- the commit of each record's code ---------------------------------------------------------

RECORDS = sorted(RUNS.rglob("config.json"))
"""Every record's config.json."""


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            ["git", "-C", str(RUNS), *args], capture_output=True, text=True, timeout=30
        )
    except OSError:  # no git
        return None


def _require_history() -> None:
    # A copy without the repository's history (no .git, or a shallow clone) cannot tell.
    shallow = _git("rev-parse", "--is-shallow-repository")
    if shallow is None or shallow.returncode != 0:
        pytest.skip("not a git checkout")
    if shallow.stdout.strip() == "true":
        pytest.skip("a shallow clone lacks the records' commits")


def _in_history(commit: str) -> bool:
    done = _git("cat-file", "-e", f"{commit}^{{commit}}")
    return done is not None and done.returncode == 0


@pytest.mark.parametrize("path", RECORDS, ids=lambda path: path.parent.name)
def test_every_record_names_a_commit_of_this_repository(path: Path) -> None:
    commit = json.loads(path.read_text()).get("commit")
    assert isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit), (
        f"{path}: no commit of its code (a 40-digit hash, from a clean checkout)"
    )
    _require_history()
    assert _in_history(commit), f"{path}: {commit} is not a commit of this repository"


def _older_blocks() -> list[tuple[str, str]]:
    # (commit, block) for each bash block of the README run with an older commit's code.
    blocks = re.findall(r"```bash\n(.*?)```", (RUNS / "README.md").read_text(), re.S)
    return [
        (found.group(1), block)
        for block in blocks
        if (found := re.search(r"git checkout ([0-9a-f]{7,40})", block))
    ]


def test_commands_run_with_an_older_commit_name_it_and_use_its_options() -> None:
    # Such a block's options are today's, or ones removed after that very commit.
    today = {opt for param in cli.train_command.params for opt in param.opts}
    blocks = _older_blocks()
    assert len(blocks) >= 5
    for commit, block in blocks:
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", block):
            name = flag[2:].replace("-", "_")
            assert flag in today or REMOVED.get(name, (None, None))[1] == commit, (
                f"{flag} in a block run at {commit}"
            )
    _require_history()
    for commit, _ in blocks:
        assert _in_history(commit), f"{commit} is not a commit of this repository"


def test_a_record_of_an_option_since_removed_is_made_at_an_older_commit() -> None:
    # A record today's code cannot read is one of the runs made by such a block: one of an
    # option removed since, or of a value today's code refuses (the actor-critic's lag).
    made_there = {
        name for _, block in _older_blocks() for name in re.findall(r"--run-dir runs/(\S+)", block)
    }
    older = []
    for path in RECORDS:
        try:
            read_config(path)
        except ConfigError as exc:
            removed = "which pong-mp no longer has" in str(exc)
            assert removed or path.parent.name in made_there, exc
            older.append(path.parent.name)
    assert len(older) >= 10
    missing = sorted(set(older) - made_there)
    assert not missing, f"records of removed options without an older commit's command: {missing}"


# -- the records are packed ---------------------------------------------------------------


@pytest.mark.parametrize("path", RECORDS, ids=lambda path: path.parent.name)
def test_every_record_is_packed_and_reads_whole(path: Path) -> None:
    # Plain files would double the repository (scripts/pack_records.py packs them).
    record = path.parent
    assert not (record / METRICS_FILE).exists() and not (record / "train.log").exists(), (
        f"{record}: run scripts/pack_records.py {record}"
    )
    assert metrics_file(record) == record / PACKED_METRICS_FILE
    batches = [r["batch"] for r in read_metrics(metrics_file(record))]
    assert batches and batches[0] == 1, f"{record}: its metrics do not start at update 1"


# -- the figures of the front pages ------------------------------------------------------------

FRONT_PAGES = (RUNS.parent.parent / "README.md", RUNS.parent / "learning.md")
"""The pages whose figures are read from records by docs/learning.md's conventions."""

_ITEM = re.compile(r"^(not by )?([+-]?\d[\d.,]*|-) \[(\w+)\]$")
_LEVEL = re.compile(r"^(0|[+-]\d+)\b")
_AT_MINUTES = re.compile(r"^at (\d+) minutes$")
_RATE = re.compile(r"(\d[\d,]*) steps/s \[(\w+)\]")
_REWARD_AT = re.compile(r"([+-]\d+(?:\.\d+)?) at (\d+) minutes \[(\w+)\]")
_GAMES = re.compile(
    r"won (\d+) games of (\d+) against the built-in AI, by ([+-]\d+(?:\.\d+)?) points a game "
    r"\(\[record\]\(([^)]+)\)\)"
)


def _shown(value: float, written: str) -> str:
    # `value` as the page writes it: the same decimals, a + where the page puts one.
    decimals = len(written.split(".")[1]) if "." in written else 0
    text = f"{value:,.{decimals}f}" if "," in written else f"{value:.{decimals}f}"
    return "+" + text if written.startswith("+") and value >= 0 else text


Records = dict[str, list[dict[str, Any]]]
"""A page's records by the name of its reference link."""


def _records_of(page: Path) -> Records:
    # The page's reference links `[name]: path/to/record`, read.
    return {
        name: read_metrics(metrics_file(page.parent / target))
        for name, target in re.findall(r"^\[(\w+)\]: (\S+)$", page.read_text(), re.M)
        if "runs/" in target
    }


def _table_figures(page: Path, records: Records) -> list[tuple[str, str, str]]:
    # (where, written, read from the record) for each figure of a table of levels or of
    # "at N minutes"; a figure in such a table without its record is a failure.
    found = []
    header: list[str] = []
    in_table = False
    for line in page.read_text().splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not in_table:  # a table's first line is its header
            header, in_table = cells, True
            continue
        if set(line) <= set("|-: "):
            continue
        level = _LEVEL.match(cells[0])
        for column, cell in zip(header[1:], cells[1:], strict=False):
            kind = _kind(column, level)
            if kind is None:
                continue
            for item in (part.strip() for part in cell.split(", ")):
                match = _ITEM.match(item)
                assert match, f"{page.name}: '{item}' ({cells[0]}, {column}) names no record"
                unreached, written, name = match.groups()
                where = f"{page.name}: {cells[0]} | {column} | {item}"
                found.append((where, written, _read(records[name], kind, written, bool(unreached))))
    return found


def _kind(column: str, level: re.Match | None) -> tuple[str, float] | None:
    # What a table's cell holds, from its column and its row's level: None for other cells.
    at = _AT_MINUTES.match(column)
    if at:
        return ("reward at", float(at.group(1)))
    if level is None:
        return None
    threshold = float(level.group(1))
    if column.startswith("env steps"):
        return ("steps", threshold)
    if column.startswith("minutes at "):
        rate = float(column.split("minutes at ")[1].split(" steps/s")[0].replace(",", ""))
        return (f"minutes at {rate}", threshold)
    if column.startswith("minutes"):  # a timed run's own clock
        return ("minutes", threshold)
    return None


def _read(
    records: list[dict[str, Any]], kind: tuple[str, float], written: str, unreached: bool
) -> str:
    # The figure as the record gives it under the conventions, written as the page writes it.
    what, number = kind
    if what == "reward at":
        reward = reward_at_minutes(records, number)
        return "none" if reward is None else _shown(reward, written)
    hit = milestones(records, (number,))[0]
    if hit["steps"] is None:  # never reached: "-", or "not by" the record's last env steps
        end = _shown(records[-1]["total_steps"] / 1e6, written) if unreached else "-"
        return written if written == end else "not reached"
    if unreached or written == "-":
        return f"reached at {hit['steps']:,} env steps"
    if what == "steps":
        return _shown(hit["steps"] / 1e6, written)
    if what == "minutes":
        return _shown(hit["minutes"], written)
    rate = float(what.split()[-1])
    return _shown(hit["steps"] / rate / 60, written)


def _prose_figures(page: Path, records: Records) -> list[tuple[str, str, str]]:
    # Rates, "+X at N minutes" and a played record's games, where the page's text names them.
    text = " ".join(page.read_text().split()).replace("**", "")
    found = []
    for written, name in _RATE.findall(text):
        found.append(
            (
                f"{page.name}: {written} steps/s [{name}]",
                written,
                _shown(training_rate(records[name]), written),
            )
        )
    for written, minutes, name in _REWARD_AT.findall(text):
        found.append(
            (
                f"{page.name}: {written} at {minutes} minutes [{name}]",
                written,
                _shown(reward_at_minutes(records[name], float(minutes)), written),
            )
        )
    for won, games, by, record in _GAMES.findall(text):
        played = json.loads((page.parent / record).read_text())
        found.append(
            (
                f"{page.name}: won {won} of {games}, by {by}",
                f"{won} {games} {by}",
                f"{played['won']} {played['games']} {_shown(played['mean_difference'], by)}",
            )
        )
    return found


@pytest.mark.parametrize("page", FRONT_PAGES, ids=lambda page: page.name)
def test_every_figure_of_a_front_page_is_its_record_read_by_the_conventions(page: Path) -> None:
    records = _records_of(page)
    figures = _table_figures(page, records) + _prose_figures(page, records)
    assert len(figures) >= 20, f"{page.name}: only {len(figures)} figures found to check"
    wrong = [
        f"{where}: the record gives {read}" for where, written, read in figures if written != read
    ]
    assert not wrong, "\n".join(wrong)


def test_the_records_index_is_current() -> None:
    # docs/runs/README.md's index, one line per record, as scripts/records_index.py makes it.
    script = RUNS.parent.parent / "scripts" / "records_index.py"
    spec = importlib.util.spec_from_file_location("records_index", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (RUNS / "README.md").read_text()
    assert module.index(RUNS) in page, "run scripts/records_index.py and paste its index"
    assert page.count("\n| `") >= len(RECORDS)
