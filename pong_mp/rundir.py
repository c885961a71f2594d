"""The run directory: its file names, its lock, its writes and reads, and the checks for a
new run, a resume and a fork.

A run directory belongs to one trainer at a time (`RunLock`). Every write is atomic and
durable (`files.py`), so a reader sees the old file or the new one; the temp files of writers
that died are removed at the next start. Every OSError of run-directory I/O becomes one
`FileError` that names the file and the cause.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import lzma
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pong_mp import checkpoint
from pong_mp import config as cfg
from pong_mp.backends.base import refuse_in_a_starting_worker
from pong_mp.checkpoint import CHECKPOINT_FILE, CheckpointError
from pong_mp.config import ConfigError, TrainConfig, shown
from pong_mp.envs import UnknownEnvError, check_env, most_points
from pong_mp.files import (
    MAX_READ_BYTES,
    FileError,
    file_error,
    file_io,
    on_disk,
    pid_alive,
    read_file,
    write_text_atomic,
)
from pong_mp.optim import dropped
from pong_mp.state import (
    TrainState,
    initial_state,
    with_hidden,
    with_new_optimizer_state,
    with_policy_lag,
    with_value_head,
)

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
PACKED_METRICS_FILE = METRICS_FILE + ".xz"
"""A committed record's metrics (docs/runs), compressed; its first line may be a `LINES_OF`
reference. Live runs write METRICS_FILE; `metrics_file` finds either."""
LINES_OF = "lines_of"
"""Key of a packed file's first line `{"lines_of": DIR, "through_batch": N}`: its first lines
are those of the record in DIR (relative to its own directory) up to update N, stored once."""
DAMAGED_METRICS_FILE = "metrics.jsonl.damaged"
"""Where `train --resume` appends the lines of metrics.jsonl that are not valid records."""
LOCK_FILE = ".lock"
RUN_FILES = (CONFIG_FILE, METRICS_FILE, CHECKPOINT_FILE)
"""The files that make a directory hold a run."""

METRICS_NUMBERS = ("episodes", "steps", "reward_mean", "seconds", "steps_per_sec")
"""Numeric fields of every metrics record besides `batch` and `running_reward` (which may be
null, before any episode): DESIGN.md's contract."""


class RunDirError(ValueError):
    """The run directory does not fit the request: another run, nothing to resume, in use by
    another trainer, or a damaged run file."""


def remove_stale_temps(run_dir: Path) -> list[Path]:
    """Remove the temp files of writers that are gone (killed mid-write); the removed paths.
    Called under the run's lock. Only pong-mp's own are touched: `.NAME.PID.tmp` (files.py)
    whose writer is gone, and an older version's `.NAME.tmp` of the run's own files; a live
    writer's (`pong-mp export`, say) and any other file are left alone."""
    removed = []
    for tmp in Path(run_dir).glob(".*.tmp"):
        stem = tmp.name[1:].removesuffix(".tmp")
        name, _, pid = stem.rpartition(".")
        if name and pid.isdigit():
            if int(pid) != os.getpid() and pid_alive(int(pid)):
                continue  # its writer is still at work
        elif stem not in RUN_FILES:
            continue  # not one of pong-mp's temp files
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


# -- the lock --------------------------------------------------------------------------------


class RunLock:
    """An exclusive flock on RUN_DIR/.lock: one trainer per run directory.

    The kernel releases an flock when its process dies, however it dies. The lock file holds
    the holder's pid, for the next trainer's message, and is removed on release, with the
    directories the lock created where nothing was written into them (`release(True)`).
    """

    def __init__(self, run_dir: Path) -> None:
        """A lock on `run_dir` (not taken yet)."""
        self.run_dir = Path(run_dir)
        self._fd: int | None = None
        self._created: list[Path] = []

    def check_free(self) -> None:
        """Raise RunDirError if another trainer holds the lock; changes nothing (a busy
        directory is reported before anything else about it)."""
        try:
            fd = os.open(self.run_dir / LOCK_FILE, os.O_RDONLY)
        except OSError:
            return  # no lock file (or none readable): acquire() will tell
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise self._busy(_read_pid(fd)) from None
        finally:
            os.close(fd)  # closing drops a lock taken here

    def _busy(self, holder: int | None) -> RunDirError:
        who = f" (pid {holder})" if holder else ""
        return RunDirError(
            f"{self.run_dir} is in use by another trainer{who}: wait for it to end, "
            "or choose another --run-dir"
        )

    def acquire(self) -> RunLock:
        """Create the directory if needed and take the lock; RunDirError if another trainer
        holds it, FileError if the directory cannot be made or written."""
        chain = (self.run_dir, *self.run_dir.parents)  # deepest first
        created = list(itertools.takewhile(lambda directory: not directory.exists(), chain))
        check_run_dir(self.run_dir)
        with file_io(self.run_dir, "create"):
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self._created = created
        path = self.run_dir / LOCK_FILE
        while True:
            with file_io(path, "create"):
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_pid(fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise file_error(path, "lock", exc) from None
                raise self._busy(holder) from None
            # A lock file removed and made anew by a failed start between our open and our
            # flock would let two trainers in: hold the lock only on the file at the path.
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    break
            os.close(fd)
        try:
            with file_io(path, "write"):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
        except FileError:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self, remove_if_unused: bool = False) -> None:
        """Drop the lock and remove its file, and with `remove_if_unused` the directories this
        lock created if nothing was written into them."""
        if self._fd is None:
            return
        try:
            # Removed while still held: a trainer that opened the old file notices in
            # acquire() that it is no longer at the path, and takes the new one.
            with contextlib.suppress(OSError):
                (self.run_dir / LOCK_FILE).unlink()
            if remove_if_unused:
                for directory in self._created:  # deepest first; rmdir keeps non-empty ones
                    with contextlib.suppress(OSError):
                        directory.rmdir()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text.isdigit() else None
    except (OSError, UnicodeDecodeError):
        return None


# -- metrics.jsonl ---------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    # A JSON whole number past a float's range (10**400) is no number a run writes.
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _check_record(record: object) -> str | None:
    # What is wrong with one metrics record, or None.
    if not isinstance(record, dict):
        return "not a JSON object"
    batch = record.get("batch")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        return f"batch must be a whole number >= 1, not {batch!r}"
    for name in METRICS_NUMBERS:
        if not _is_number(record.get(name)):
            return f"{name} must be a number, not {record.get(name)!r}"
    running = record.get("running_reward")
    if running is not None and not _is_number(running):
        return f"running_reward must be a number or null, not {running!r}"
    for name in ("elapsed", "total_steps"):
        if name in record and not _is_number(record[name]):
            return f"{name} must be a number, not {record[name]!r}"
    return None


def metrics_file(run_dir: Path) -> Path:
    """The run's metrics file: PACKED_METRICS_FILE where only that one exists, else
    METRICS_FILE."""
    plain = Path(run_dir) / METRICS_FILE
    packed = Path(run_dir) / PACKED_METRICS_FILE
    return packed if packed.exists() and not plain.exists() else plain


_MAX_LINKS = 16  # `lines_of` references followed in a row: a loop is damage, not a run


def metrics_bytes(path: Path, _links: int = 0) -> bytes:
    """The bytes of a metrics file as the trainer wrote them: a packed one decompressed,
    with the lines it refers to put back. RunDirError if a packed file is damaged or its
    reference leads nowhere; FileError if a file cannot be read."""
    path = Path(path)
    with file_io(path, "read"):
        data = read_file(path)
    if not path.name.endswith(".xz"):
        return data
    unpacking = lzma.LZMADecompressor()
    try:
        data = unpacking.decompress(data, max_length=MAX_READ_BYTES + 1)
    except lzma.LZMAError as exc:
        raise RunDirError(f"{path}: damaged xz file ({exc})") from None
    if len(data) > MAX_READ_BYTES:  # a few kB may unpack to gigabytes
        raise RunDirError(f"{path}: unpacks to more than {MAX_READ_BYTES:,} bytes")
    if not unpacking.eof:
        raise RunDirError(f"{path}: damaged xz file (it ends before its stream does)")
    first, _, rest = data.partition(b"\n")
    try:
        link = json.loads(first)
    except (ValueError, RecursionError):
        return data  # its first line is damaged: _scan_metrics names it
    if not isinstance(link, dict) or LINES_OF not in link:
        return data
    through = link.get("through_batch")
    if not isinstance(link[LINES_OF], str) or not isinstance(through, int):
        raise RunDirError(
            f"{path}, line 1: a {LINES_OF} reference needs a directory and through_batch"
        )
    if _links >= _MAX_LINKS:
        raise RunDirError(f"{path}: more than {_MAX_LINKS} {LINES_OF} references in a row")
    source = path.parent / link[LINES_OF]
    if not source.is_dir():
        raise RunDirError(f"{path}: its first lines are those of {source}, which is missing")
    shared, damaged = _scan_metrics(metrics_bytes(metrics_file(source), _links + 1))
    if damaged:
        raise RunDirError(f"{path}: its first lines are those of {source}, which is damaged")
    # The shared lines are rewritten as the trainer writes them (json.dumps), so the bytes
    # are the fork's own copy.
    kept = [json.dumps(record) + "\n" for record in shared if record["batch"] <= through]
    return "".join(kept).encode() + rest


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The validated records of a metrics.jsonl (or a packed one); [] if there is none.

    A last line without its newline (a write cut off by a crash) is skipped; any other line
    that is not UTF-8 JSON with the contract's fields raises RunDirError naming it. Raises
    FileError if the file cannot be read.
    """
    path = Path(path)
    if not path.exists():
        return []
    records, damaged = _scan_metrics(metrics_bytes(path))
    if damaged:
        number, _, problem = damaged[0]
        raise RunDirError(f"{path}, line {number}: damaged metrics record ({problem})")
    return records


def _scan_metrics(data: bytes) -> tuple[list[dict[str, Any]], list[tuple[int, bytes, str]]]:
    # The valid records of a metrics file's bytes, and its damaged lines as (line number,
    # bytes, problem). A last line without its newline (a write cut off by a crash) is
    # neither; a record whose update does not follow the one before is damaged.
    lines = data.split(b"\n")
    records: list[dict[str, Any]] = []
    damaged = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = cfg.parse_json(raw.decode("utf-8"), finite=False)  # as written
            problem = _check_record(record)
        except cfg.JSONTooDeep as exc:
            problem = str(exc)
        except (UnicodeDecodeError, ValueError):
            problem = "not UTF-8 JSON"
        if problem is None and records and record["batch"] <= records[-1]["batch"]:
            problem = f"update {record['batch']} after update {records[-1]['batch']}"
        if problem is None:
            records.append(record)
        elif number < len(lines):  # a last line is cut off, not damaged
            damaged.append((number, raw, problem))
    return records, damaged


def keep_metrics_until(path: Path, last_batch: int) -> str | None:
    """Rewrite metrics.jsonl atomically with only the records up to `last_batch` (those the
    checkpoint holds; later updates are played again); nothing if there is nothing to drop.

    Damaged lines are first appended to DAMAGED_METRICS_FILE beside it, so that nothing is
    lost; the line returned says so, and names the updates up to `last_batch` that have no
    record (None when all is well).
    """
    path = Path(path)
    data = metrics_bytes(path) if path.exists() else b""
    records, damaged = _scan_metrics(data)
    kept = [r for r in records if r["batch"] <= last_batch]
    missing = sorted(set(range(1, last_batch + 1)) - {r["batch"] for r in kept})
    if (len(kept) == len(records) and data.endswith(b"\n") and not damaged) or not data:
        # A log removed or cut short by hand: the run goes on, and says what it lacks.
        return f"{path}: updates {_ranges(missing)} have no record in it" if missing else None
    aside = path.with_name(DAMAGED_METRICS_FILE)
    if damaged:
        # Durable before the log loses them: a crash in between leaves them in both.
        with file_io(aside, "write"), open(aside, "ab") as fh:
            fh.write(b"".join(raw + b"\n" for _, raw, _ in damaged))
            fh.flush()
            os.fsync(fh.fileno())
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
    if not damaged:
        return None
    numbers = [number for number, _, _ in damaged]
    listed = ", ".join(map(str, numbers[:5])) + (", ..." if len(numbers) > 5 else "")
    more = ", ..." if len(numbers) > 1 else ""
    note = (
        f"{path}: damaged line{'s' * (len(numbers) != 1)} {listed} ({damaged[0][2]}{more}) "
        f"moved to {aside}"
    )
    if missing:
        note += f"; updates {_ranges(missing)} have no record left (the damage replaced them)"
    return note


def _ranges(numbers: list[int]) -> str:
    # "3, 7 to 9" for [3, 7, 8, 9] (increasing): consecutive numbers share number - index.
    runs = itertools.groupby(enumerate(numbers), key=lambda pair: pair[1] - pair[0])
    spans = [[n for _, n in run] for _, run in runs]
    return ", ".join(str(s[0]) if len(s) == 1 else f"{s[0]} to {s[-1]}" for s in spans)


class MetricsLog:
    """Appends metrics records; a failed write is cut back off, so the file never ends in a
    half record. Raises FileError."""

    def __init__(self, path: Path) -> None:
        """Open `path` for appending."""
        self.path = Path(path)
        with file_io(self.path, "open"):
            # Unbuffered: a record reaches the OS whole or is cut back off at once, and
            # nothing half-written waits in a buffer to be flushed later.
            self._fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 (see close())

    def write(self, record: dict[str, Any]) -> None:
        """Append one record."""
        line = (json.dumps(record) + "\n").encode()
        start = self._fh.seek(0, os.SEEK_END)
        try:
            if self._fh.write(line) != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            with contextlib.suppress(OSError):
                self._fh.truncate(start)
            raise file_error(self.path, "write", exc) from None

    def close(self) -> None:
        """Close the file; a flush that fails here has nothing left to lose."""
        with contextlib.suppress(OSError):
            self._fh.close()


# -- a run's start ----------------------------------------------------------------------------


def prepare_run(
    run_dir: Path, resume: bool, given: dict[str, Any], *, build_env: bool = True
) -> tuple[TrainConfig, TrainState]:
    """Check the run directory and the options the user set (`given`); returns the run's
    config and starting state, writing nothing.

    A new run refuses a directory that holds one; a resumed run keeps its stored algorithm
    options (merge_for_resume), and one stopped before its first checkpoint resumes from its
    start. With `build_env`, the env is made once to check it and its --env-arg. Raises
    ConfigError, RunDirError, CheckpointError or FileError.
    """
    run_dir = Path(run_dir)
    # A drop's points typed as one number compare equal to the stored tuple.
    given = {**given, **cfg.drop_options(given), "run_dir": str(run_dir)}
    if resume:
        config_path, ckpt_path = run_dir / CONFIG_FILE, run_dir / CHECKPOINT_FILE
        # on_disk: a checkpoint link that leads nowhere is no run stopped before its first
        # checkpoint, to be trained again from its start over its records.
        if not on_disk(config_path):  # one that is no regular file: as it is read
            what = "no checkpoint.npz" if not on_disk(ckpt_path) else f"no {CONFIG_FILE}"
            raise RunDirError(f"{run_dir}: nothing to resume ({what})")
        if on_disk(run_dir / PACKED_METRICS_FILE):
            # A committed record keeps no weights: resumed from its start, it would be
            # trained again over its own files (config.json rewritten).
            raise RunDirError(
                f"{run_dir} is a record ({PACKED_METRICS_FILE}): a run is not continued "
                "inside one; make it again in a new --run-dir with its command "
                "(docs/runs/README.md), and resume that"
            )
        stored = cfg.read_config(config_path)
        config = cfg.merge_for_resume(stored, given)
        _validate(config, build_env)
        if on_disk(ckpt_path):
            state = _load_checkpoint(ckpt_path, stored)
        elif stored.fork_from is not None:
            # A fork writes its first checkpoint as it starts: a new run's weights are not
            # where it stopped.
            raise RunDirError(
                f"{run_dir}: a fork that stopped before its first checkpoint was written; "
                "remove the directory and fork again"
            )
        else:
            state = initial_state(config)  # stopped before its first checkpoint
        # Damaged lines are no reason to stop: the log is a record, the checkpoint is the
        # state. They are moved aside once the run has started (keep_metrics_until); a file
        # that cannot be read is a FileError now.
        if on_disk(run_dir / METRICS_FILE):
            metrics_bytes(run_dir / METRICS_FILE)
    else:
        existing = [name for name in RUN_FILES if on_disk(run_dir / name)]
        if existing:
            raise RunDirError(
                f"{run_dir} already holds a run ({', '.join(existing)}): pass --resume to "
                "continue it, or choose another --run-dir"
            )
        if given.get("fork_from") is not None:
            if not str(given["fork_from"]).strip():
                raise RunDirError(cfg.NO_FORK_FROM)
            return _prepare_fork(Path(given["fork_from"]), given, build_env)
        try:
            config = TrainConfig(**given)
        except TypeError as exc:
            raise ConfigError(str(exc)) from None
        _validate(config, build_env)
        state = initial_state(config)
    return config, state


def _prepare_fork(
    source: Path, given: dict[str, Any], build_env: bool
) -> tuple[TrainConfig, TrainState]:
    # A new run from the checkpoint of the run in `source`: its algorithm options unless
    # `given` (the options the user set) changes them; the rest as for any new run.
    config_path, ckpt_path = source / CONFIG_FILE, source / CHECKPOINT_FILE
    if not source.is_dir():
        what = "a file, not a run directory" if source.exists() else "no such run directory"
        raise RunDirError(f"--fork-from {source}: {what}")
    missing = [path.name for path in (config_path, ckpt_path) if not on_disk(path)]
    if missing:
        raise RunDirError(f"--fork-from {source}: nothing to fork from (no {missing[0]})")
    stored = cfg.read_config(config_path)
    for name in cfg.FORK_KEEPS:
        if name in given and given[name] != getattr(stored, name):
            flag = cfg.option_flag(name)
            raise ConfigError(
                f"a fork keeps the {flag} of the run it starts from, {getattr(stored, name)!r} "
                f"(its checkpoint fits only that), not {given[name]!r}: omit {flag}"
            )
    _refuse_points_without_their_values(stored, given)
    inherited = {name: getattr(stored, name) for name in cfg.ALGORITHM_FIELDS}
    try:
        config = TrainConfig(**{**inherited, **given})  # with the fork_from given
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
    # realpath, not resolve(): a symlink loop on the way is for the write to name
    fork, run = Path(os.path.realpath(config.run_dir)), Path(os.path.realpath(source))
    # Either inside the other: removing the one would remove the other with it.
    if fork.is_relative_to(run) or run.is_relative_to(fork):
        where = "inside" if fork.is_relative_to(run) else "around"
        raise RunDirError(
            f"--run-dir {config.run_dir} is {where} the run it forks from, {source}: choose a "
            "directory outside it"
        )
    _validate(config, build_env)  # names an --hidden out of range before it is compared
    if config.hidden < stored.hidden:
        raise ConfigError(
            f"a fork may widen the hidden layer of the run it starts from ({stored.hidden} "
            f"units), not narrow it to {config.hidden}: give --hidden {stored.hidden} or more"
        )
    state = _load_checkpoint(ckpt_path, stored)
    _refuse_a_value_its_drop_hides(config, given, state.steps)
    read_metrics(source / METRICS_FILE)  # a damaged file is refused before anything runs
    if config.hidden != stored.hidden:
        state = with_hidden(state, stored.shape, config.hidden, config.seed)
    if config.value_head != stored.value_head:
        # A switch of learner: the actor-critic has a value head, Karpathy's learner none.
        state = with_value_head(state, config.shape, config.value_head)
    if config.policy_lag != stored.policy_lag:
        state = with_policy_lag(state, config.policy_lag)
    if config.algo != stored.algo:
        # pg's step is a sum over a batch, the actor-critic's a mean per step: the optimizer's
        # running scale of the one would hold the other back for hundreds of updates.
        state = with_new_optimizer_state(state)
    return config, state


def _refuse_a_value_its_drop_hides(config: TrainConfig, given: dict[str, Any], steps: int) -> None:
    # A fork inherits its source's drops: where one has already fallen, a --lr or
    # --entropy-bonus given alone would be stored and never used.
    for value, (at, to) in cfg.DROPS.items():
        points, values = getattr(config, at), getattr(config, to)
        reached = sum(steps >= point for point in points)  # points are increasing
        if value in given and at not in given and to not in given and reached:
            flag, at_flag, to_flag = map(cfg.option_flag, (value, at, to))
            in_effect = dropped(given[value], steps, points, values)
            keep = ""
            if reached < len(points):
                ahead = f"{at_flag} {shown(points[reached:])} {to_flag} {shown(values[reached:])}"
                keep = f" (or {ahead} to keep the points still ahead)"
            raise ConfigError(
                f"{flag} {shown((given[value],))} would never apply: the run forked from has "
                f"{at_flag} {shown(points)}, so from its checkpoint's {steps:,} env steps on it "
                f"trains with {to_flag} {shown((in_effect,))}; give {at_flag} 0 too{keep}"
            )


def _refuse_points_without_their_values(stored: TrainConfig, given: dict[str, Any]) -> None:
    # A fork given a drop's points alone takes the values of the run forked from: say so
    # when they do not match, rather than count values the user never typed.
    for at, to in cfg.DROPS.values():
        points, values = given.get(at), getattr(stored, to)
        if points and to not in given and len(points) != len(values):
            raise ConfigError(
                f"{cfg.option_flag(at)} {shown(points)} has {len(points)} point"
                f"{'s' * (len(points) != 1)}, and the run forked from has {cfg.option_flag(to)} "
                f"{shown(values)}: give {cfg.option_flag(to)} too, one value for each point"
            )


def copy_fork_metrics(config: TrainConfig, last_batch: int) -> None:
    """Start a fork's metrics.jsonl with its source's records up to `last_batch` (its
    checkpoint's), so that the fork's curve starts where the run did."""
    assert config.fork_from is not None, "not a fork"
    records = read_metrics(Path(config.fork_from) / METRICS_FILE)
    kept = [record for record in records if record["batch"] <= last_batch]
    write_text_atomic(
        Path(config.run_dir) / METRICS_FILE, "".join(json.dumps(r) + "\n" for r in kept)
    )


def _load_checkpoint(path: Path, stored: TrainConfig) -> TrainState:
    # The state in the checkpoint at `path`; CheckpointError unless it is the run's.
    state, ckpt_config = checkpoint.load(path)
    # Its weights fit its own config (checkpoint.load checks that): the two configs must
    # agree on what shapes them (policy, channels, algo's value head) and on the run's seeds.
    pairs = [(name, ckpt_config.get(name), getattr(stored, name))
             for name in ("env", "hidden", "seed", "batch_size")]  # fmt: skip
    pairs += [("env_kwargs", ckpt_config.get("env_kwargs", {}), stored.env_kwargs)]
    pairs += [(name, cfg.stored_option(ckpt_config, name), getattr(stored, name))
              for name in ("policy", "algo")]  # fmt: skip
    pairs += [("channels", cfg.stored_conv_channels(ckpt_config), stored.conv_channels)]
    for name, theirs, ours in pairs:
        if theirs != ours:
            raise CheckpointError(
                f"{path}: belongs to another run ({name} {theirs!r}, {CONFIG_FILE} says {ours!r})"
            )
    if (state.momentum is not None) != (stored.optimizer == "adam"):
        raise CheckpointError(
            f"{path}: its optimizer state does not fit --optimizer {stored.optimizer}"
        )
    return state


def _validate(config: TrainConfig, build_env: bool) -> None:
    config.validate()
    if config.ray_address and config.backend != "ray":
        config.backend = "ray"  # --ray-address implies the ray backend
    check_run_dir(Path(config.run_dir))
    try:
        if build_env:
            check_env(config.env, config.env_kwargs)
    except UnknownEnvError as exc:
        raise ConfigError(str(exc)) from None
    most = most_points(config.env, config.env_kwargs)
    if config.target_reward is not None and most is not None and abs(config.target_reward) > most:
        # A typo (99 for 19) would train forever, a target below -most stop at once.
        raise ConfigError(
            f"--target-reward {config.target_reward:g} is out of reach: a game of {config.env} "
            f"scores between -{most} and +{most}"
        )


def check_run_dir(run_dir: Path) -> None:
    """Raise RunDirError if `run_dir` can never be a run directory (a file, or a path below
    one)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--run-dir {run_dir} is a file, not a directory")
    parent = next((parent for parent in run_dir.parents if parent.exists()), None)
    if parent is not None and not parent.is_dir():
        raise RunDirError(f"--run-dir {run_dir}: {parent} is a file, not a directory")


@contextlib.contextmanager
def open_run(
    run_dir: str | Path, resume: bool, given: dict[str, Any]
) -> Iterator[tuple[TrainConfig, TrainState]]:
    """Check the options, take the run directory's lock, and yield (config, state).

    Bad options are refused before the directory is touched. Under the lock, dead writers'
    temp files are removed and the directory is checked again (another trainer may have
    written it in between). A start that wrote nothing leaves no directory behind.
    """
    refuse_in_a_starting_worker()  # before anything: a worker running the user's script
    if not str(run_dir).strip():
        raise RunDirError(cfg.NO_RUN_DIR)
    run_dir = Path(run_dir)
    lock = RunLock(run_dir)
    lock.check_free()
    prepare_run(run_dir, resume, given)
    lock.acquire()
    try:
        remove_stale_temps(run_dir)
        yield prepare_run(run_dir, resume, given, build_env=False)
    finally:
        lock.release(remove_if_unused=True)


def checkpoint_on_disk(run_dir: Path) -> int | None:
    """The update of the checkpoint in `run_dir` as it is on disk now (None: none readable),
    for a stop message."""
    try:
        return int(checkpoint.read_arrays(Path(run_dir) / CHECKPOINT_FILE, ("batch",))["batch"])
    except (ValueError, TypeError):  # damaged (a CheckpointError), or no scalar: none readable
        return None


def where_it_stands(run_dir: Path, reached: int | None) -> tuple[str, bool]:
    """What a run stopped at update `reached` (None: never started) left in `run_dir`, for its
    stop message, and whether `--resume` continues it."""
    saved = checkpoint_on_disk(run_dir)
    if saved is None:
        config_path = Path(run_dir) / CONFIG_FILE
        if not config_path.exists():
            return f"nothing was written in {run_dir}", False
        try:  # read as prepare_run reads it (where it cannot be, --resume names why)
            forked = cfg.read_config(config_path).fork_from is not None
        except ConfigError:
            forked = False
        if forked:  # as prepare_run says to a --resume of it
            return (
                f"no checkpoint in {run_dir} yet, and a fork resumes only from its first one: "
                "remove the directory and fork again",
                False,
            )
        return f"no checkpoint in {run_dir} yet; --resume starts the run from its start", True
    if reached is None or saved >= reached:
        return f"checkpoint saved at update {saved} in {run_dir}", True
    lost = f"updates {saved + 1} to {reached} were"
    if reached == saved + 1:
        lost = f"update {reached} was"
    return (
        f"the checkpoint in {run_dir} is at update {saved} ({lost} not saved and will be "
        "played again)",
        True,
    )


def write_config(run_dir: Path, config: TrainConfig) -> None:
    """Write config.json atomically: every option, and the code's commit (`code_commit`), so
    that a record names the code that remakes it."""
    data = {**json.loads(config.to_json()), "commit": code_commit()}
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_text_atomic(Path(run_dir) / CONFIG_FILE, text)


def code_commit() -> str | None:
    """The commit of the git checkout this pong-mp runs from, "-dirty" where the package's
    tracked files differ; None for an installed copy, or without git."""
    package = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    # A copy installed inside some other repository is not that repository's code.
    if top is None or Path(top).resolve() / package.name != package:
        return None
    commit = git("rev-parse", "--verify", "HEAD")
    if commit is None:
        return None
    changed = git("status", "--porcelain", "--untracked-files=no", "--", str(package))
    return commit if changed == "" else f"{commit}-dirty"
