"""The `pong-mp` command line: argument handling only; the work is done elsewhere.

Every expected failure (a bad option, an unknown env, a run directory or checkpoint that does
not fit) is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import functools
import io
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import click

from pong_mp import config, signals
from pong_mp.backends import BackendUnavailable, WorkerError
from pong_mp.checkpoint import CheckpointError, export_model, load_policy, stored_shape
from pong_mp.envs import (
    FAKE_PONG_ID,
    SUPPORTED,
    UnknownEnvError,
    check_env,
    first_line,
    pass_stops,
    what_it_did,
)
from pong_mp.files import DISK_FULL, FileError, path_too_long
from pong_mp.learner import NonFiniteError
from pong_mp.progress import make_reporter, output_full, output_gone, output_stop, refused_output
from pong_mp.rundir import RunDirError, checkpoint_on_disk, open_run, where_it_stands
from pong_mp.tools import bench, plot
from pong_mp.tools.bench import format_bench, run_bench
from pong_mp.tools.play import GameScore, evaluation, play_games, summary
from pong_mp.tools.projection import format_projection, measure_costs, run_projection
from pong_mp.tools.recording import VideoRecorder
from pong_mp.trainer import reached_target, run

EXIT_ERROR = 1
"""A run that failed (a worker error, non-finite numbers)."""
EXIT_USAGE = 2
"""Bad input: an option, the run directory or a checkpoint."""
EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE
"""Standard output was closed (`| head -1`): SIGPIPE's status, after the command's cleanup."""


def _say(line: str) -> None:
    # A last line on stderr; a terminal that hung up must not turn an exit into a traceback.
    stream = sys.stderr or sys.__stderr__  # an env module may have set sys.stderr to None
    if stream is not None:  # None: started with it closed
        with contextlib.suppress(OSError):
            click.echo(line, file=stream)


LINE_MOST = 2000
"""The most characters of an error line: a value echoed in it may be megabytes long."""


def _one_line(text: str) -> str:
    """`text` on one line: a path may hold a newline (or a carriage return), shown escaped;
    beyond LINE_MOST characters, its middle cut out."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    if len(text) > LINE_MOST:
        half = LINE_MOST // 2
        text = f"{text[:half]} ...({len(text) - 2 * half:,} characters)... {text[-half:]}"
    return text


def _fail(message: str, code: int) -> None:
    _say(f"pong-mp: error: {_one_line(message)}")
    sys.exit(code)


def _failed(exc: Exception, tail: str = "") -> None:
    """Exit 1 for a run that failed: one line, then the worker's traceback if it sent one."""
    cause = f"\n{exc.__cause__}" if exc.__cause__ is not None else ""
    _say(f"pong-mp: error: {exc}{tail}{cause}")
    sys.exit(EXIT_ERROR)


@contextlib.contextmanager
def _usage_errors(*kinds: type[Exception]) -> Iterator[None]:
    """An exception of `kinds` in the block is its one line on stderr and exit code 2."""
    try:
        yield
    except kinds as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            raise  # the path shortened, by _OneLineErrors
        _fail(str(exc), _input_or_disk(exc))


def _input_or_disk(exc: BaseException) -> int:
    """Exit code 1 where the disk refused a write (full, over quota), else 2 (bad input)."""
    return EXIT_ERROR if getattr(exc, "errno", None) in DISK_FULL else EXIT_USAGE


def _echo_or_stop(text: str) -> None:
    """Print `text` on stdout; a closed stdout stops the command as SIGPIPE stops `train`."""
    try:
        with signals.at_once():  # a reader that stopped reading must not make a stop wait
            click.echo(text)
    except OSError as exc:
        stop = output_stop(exc)
        if stop is None:
            raise
        raise stop from None


def _detach_stdout() -> None:
    """Point stdout at /dev/null: what Python still holds for it would fail again on exit."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def _exit_output_closed() -> NoReturn:
    # Standard output was closed (`| head -1`): quiet, with SIGPIPE's status.
    _detach_stdout()
    sys.exit(EXIT_OUTPUT_CLOSED)


class _FiniteRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (which compare false with any bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The float, or a usage error for a non-finite one (said before any range)."""
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def _exit_stopped(line: str, code: int) -> None:
    # The last words of a command stopped by a signal or a closed (or full) stdout.
    _say(_one_line(line))
    if code == EXIT_OUTPUT_CLOSED or not _flushed():
        _detach_stdout()
    sys.exit(code)


LINGER_SECONDS = 5.0
"""How long the pong-mp process waits, its command done, for threads other code started (an
env module's) to end, before it exits without them."""


def _wait_for_lingering_threads(seconds: float) -> bool:
    """Wait up to `seconds` for the threads Python would wait for as it exits, and say
    which are left: pong-mp's own have ended with its command, and a thread pool's end as
    Python finalizes, so these are other code's, which may never end. Whether any are left."""
    pools = getattr(sys.modules.get("concurrent.futures.thread"), "_threads_queues", {})
    deadline = time.monotonic() + seconds
    left = []
    for thread in threading.enumerate():
        if not (thread.daemon or thread is threading.main_thread() or thread in pools):
            thread.join(max(0.0, deadline - time.monotonic()))
            left += [thread.name] if thread.is_alive() else []
    if left:
        _say(f"pong-mp: warning: left {len(left)} thread(s) that pong-mp did not start (an env's?) "
             f"and that had not ended {seconds:g} s after the command: {', '.join(left)}")
    return bool(left)


def _leave(code: object) -> NoReturn:
    """Exit with sys.exit's `code` without waiting for other threads: atexit's functions run
    and the outputs are flushed, but not Python's finalizing, which would wait for them."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def _env_prints(as_json: bool) -> contextlib.AbstractContextManager[Any]:
    """Where the env's code runs in this process: with --json, standard output is the report's
    alone, so what it prints (with Python) goes to stderr meanwhile."""
    return contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()


def _flushed() -> bool:
    """Whether what stdout holds could be written (not to a full disk, say)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        return False
    return True


def _stoppable(command: Callable[..., None]) -> Callable[..., None]:
    """Run a command with stop signals raised as Interrupted, so that its cleanup (a
    recording's temp file, a bench's workers) runs before it exits with one line."""

    @functools.wraps(command)
    def stoppable(*args: Any, **kwargs: Any) -> None:
        try:
            with signals.stop_signals_raise():
                command(*args, **kwargs)
        except signals.Interrupted as exc:
            _exit_stopped(f"pong-mp: stopped by {exc}", exc.exit_code)

    return stoppable


class _ToStderr(logging.StreamHandler):
    """Writes to sys.stderr as it is at each line: a notebook's cell's, a caller's capture."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        """sys.stderr now."""
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


class _GoneOutput(io.TextIOBase):
    """sys.stdout for a process started with it closed: every write finds its reader gone."""

    def write(self, text: str) -> int:
        """Raise BrokenPipeError, as a write to a pipe with no reader does."""
        raise BrokenPipeError(errno.EPIPE, "standard output closed")


def _closed_stdout_as_gone() -> None:
    """A sys.stdout of None (closed): as a pipe whose reader left, whose writes stop the
    command as SIGPIPE would."""
    if sys.stdout is None:
        sys.stdout = _GoneOutput()


@contextlib.contextmanager
def _output_closed_stops() -> Iterator[None]:
    # click's main ends a broken pipe with exit 1 and nothing said, and a KeyboardInterrupt
    # with an empty line before its Abort: both must be seen first.
    try:
        yield
    except OSError as exc:
        if output_full(exc):  # a write to a full stdout ends the command: one line, exit 1
            stop = refused_output(exc)
            _exit_stopped(f"pong-mp: stopped by {stop}", stop.exit_code)
        if not output_gone(exc):
            raise
        _exit_output_closed()  # a SystemExit, which click's main lets through
    except KeyboardInterrupt:
        # Python's own, where pong-mp's handlers are not in place (a Ctrl-C while it
        # imports an env module, or that module raising it).
        _exit_stopped("pong-mp: stopped by SIGINT", 130)


class _OneLineErrors(click.Group):
    """Turns click's multi-line usage errors into one line on stderr."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        """Parse the options (`--help` and `--version` print as they are parsed)."""
        with _output_closed_stops():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command (its own options and `--help` are parsed here)."""
        with _output_closed_stops():
            return super().invoke(ctx)

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        """Run the command; usage errors become `pong-mp: error: ...` and exit code 2."""
        if args is not None:  # a caller's process (a test, a notebook): its handlers stay
            return self._main(args, *rest, **kwargs)
        # The pong-mp process, from the command line: its stop signals are pong-mp's from
        # here to the exit. As Python finalizes it puts the default handlers back, so a stop
        # that came too late to be raised would kill the process without a word: the
        # signals are ignored first, and a stop that came after the command's last safe
        # point ends a command that succeeded as any stop does.
        _closed_stdout_as_gone()  # started with it closed (`>&-`)
        if isinstance(sys.stdout, io.TextIOWrapper):  # a path it cannot encode is escaped
            sys.stdout.reconfigure(errors="backslashreplace")  # (PYTHONIOENCODING=ascii)
        signals.keep_ignored()  # as they came in: an env module imported later may ignore them
        signals.raise_stop_signals()
        repeat = None
        try:
            code = self._main(args, *rest, **kwargs)  # click's Exit gives its code
        except SystemExit as ended:
            code = ended.code
        except signals.Interrupted as stop:  # a repeat, raised where no command catches it
            code, repeat = stop.exit_code, stop
        stuck = _wait_for_lingering_threads(0.0 if repeat else LINGER_SECONDS)
        try:
            late = signals.ignore_stop_signals()
            stop = repeat or (late if code in (0, None) else None)
            if stop is not None:
                _exit_stopped(f"pong-mp: stopped by {stop}", stop.exit_code)
            sys.exit(code)
        except SystemExit as leaving:
            if stuck:  # Python would wait for them as it finalizes, deaf to stop signals
                _leave(leaving.code)
            raise

    def _main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            # `pong-mp` alone, or a command without its arguments: the help, as --help shows it.
            with _output_closed_stops():
                click.echo(exc.ctx.get_help() if exc.ctx is not None else str(exc))
            sys.exit(0)
        except click.exceptions.Abort:
            _fail("aborted", 130)
        except BrokenPipeError:
            _exit_output_closed()
        except click.UsageError as exc:
            _fail(_removed(exc) or exc.format_message().replace("\n", " "), EXIT_USAGE)
        except OSError as exc:
            # A path the system cannot even look up, before the command wrote anything.
            if exc.errno != errno.ENAMETOOLONG:
                raise
            _fail(str(path_too_long(exc)), EXIT_USAGE)
        except click.ClickException as exc:
            _fail(exc.format_message(), EXIT_USAGE)


def _removed(exc: click.UsageError) -> str | None:
    """The error of an option pong-mp no longer has (naming its commit); else None."""
    if isinstance(exc, click.NoSuchOption):
        name = exc.option_name.removeprefix("--").replace("-", "_")
        if name in config.REMOVED:
            commit = config.REMOVED[name][1]
            return (
                f"pong-mp no longer has {exc.option_name}; the code of commit {commit} has it "
                f"(git checkout {commit})"
            )
    return None


@click.group(
    cls=_OneLineErrors,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(package_name="pong-mp")
def main() -> None:
    """pong-mp: teach a numpy policy to play Atari Pong from pixels, fast and reproducibly."""
    # Warnings from the backends (a worker replaced, an episode retried) go to stderr.
    logger = logging.getLogger("pong_mp")
    if not any(isinstance(handler, _ToStderr) for handler in logger.handlers):  # once a process
        handler = _ToStderr()
        handler.setFormatter(logging.Formatter("pong-mp: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _kept(run_dir: Path) -> str:
    """What a failed run keeps, as its error line ends: the checkpoint on disk."""
    on_disk = checkpoint_on_disk(run_dir)
    if on_disk is None:
        return where_it_stands(run_dir, None)[0]
    return f"the last good checkpoint, update {on_disk}, is kept in {run_dir}"


def _parse_env_args(pairs: tuple[str, ...]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--env-arg")
        try:
            kwargs[key] = config.parse_json(raw)
        except config.JSONTooDeep as exc:
            raise click.BadParameter(f"{key}: {exc}", param_hint="--env-arg") from None
        except ValueError:
            kwargs[key] = raw  # a bare word is a string
    return kwargs


class _Numbers(click.ParamType):
    """Comma-separated numbers (a drop's points or values: 4e6,6.3e6) as a tuple."""

    name = "numbers"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[float, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return tuple(float(part) for part in str(value).split(","))
        except ValueError:
            self.fail(f"{value!r} is not a number or comma-separated numbers", param, ctx)


class _FileToWrite(click.Path):
    """A file to write: a path that ends with a slash means a directory (as to `cp`), and
    would lose the slash in a Path, so it is refused."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        """The path; fails on a trailing slash."""
        if isinstance(value, str) and value.endswith(os.sep):
            self.fail(f"{value!r} ends with {os.sep}: name a file, not a directory", param, ctx)
        return super().convert(value, param, ctx)


class _GroupedOption(click.Option):
    """An option with its group in the help (config.OPTION_GROUPS)."""

    def __init__(self, *args: Any, group: str, **kwargs: Any) -> None:
        """click's option, in `group`."""
        super().__init__(*args, **kwargs)
        self.group = group


class _GroupedCommand(click.Command):
    """A command whose help shows its options group by group, in OPTION_GROUPS' order."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each group's options under its heading; --help with the first group's."""
        records: dict[str, list[tuple[str, str]]] = {group: [] for group in config.OPTION_GROUPS}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                records[getattr(param, "group", config.OPTION_GROUPS[0])].append(record)
        for group, rows in records.items():
            if rows:
                with formatter.section(f"{group.capitalize()} options"):
                    formatter.write_dl(rows)


_DEFAULT = click.core.ParameterSource.DEFAULT
"""Where an option's value came from when the user did not give it."""


def _config_options(
    groups: tuple[str, ...] = config.OPTION_GROUPS,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator adding an option for each TrainConfig field of `groups` (config.option)."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        for f in reversed(dataclasses.fields(config.TrainConfig)):
            if f.metadata["group"] in groups:
                command = _field_option(f)(command)
        return command

    return add


def _field_option(f: dataclasses.Field) -> Callable[[Callable[..., Any]], Any]:
    # The click option of field `f`: its flags, type, default, help and group.
    kinds = {"int": int, "float": float, "str": str, "tuple[float, ...]": _Numbers()}
    meta = dict(f.metadata)
    name = f.name.replace("_", "-")
    decls = [meta.pop("flag", f"--{name}")]
    kwargs: dict[str, Any] = {
        "help": meta.pop("help"), "cls": _GroupedOption, "group": meta.pop("group")
    }
    if f.name == "env_kwargs":  # KEY=VALUE pairs, parsed by _parse_env_args
        decls.append("env_args")
        kwargs.update(multiple=True, metavar=meta.pop("metavar"))
    elif f.type == "bool":
        decls = [f"{decls[0]}/--no-{name}"]
        kwargs["default"] = f.default
    else:
        kind = str(f.type).removesuffix(" | None")
        choices = meta.pop("choices", None)
        kwargs["type"] = click.Choice(choices) if choices else kinds[kind]
        # A drop's default is given and shown as it is typed; one made per run (the CPU
        # count) is shown in words, by its field's show_default.
        default = f.default_factory if f.default is dataclasses.MISSING else f.default
        kwargs["default"] = config.shown(default) if isinstance(default, tuple) else default
        kwargs.update(meta)
    return click.option(*decls, **kwargs)


@main.command("train", cls=_GroupedCommand)
@click.option(
    "--resume",
    is_flag=True,
    cls=_GroupedOption,
    group="run",
    help="Continue the run in --run-dir from its checkpoint.",
)
@click.option(
    "--preset",
    cls=_GroupedOption,
    group="run",
    type=click.Choice(sorted(config.PRESETS)),
    help="A named set of algorithm options; options given beside it win. karpathy: "
    "pg-pong exactly (RMSProp, lr 1e-4, batch 10, H 200, the MLP); pg: the same at lr 1e-3 "
    "(the defaults before the actor-critic); ppo: the actor-critic on the MLP (Adam, lr "
    "1e-3, entropy 0.01 throughout, 4 passes of 4 minibatches); batch16: the defaults with "
    "a batch of 16 episodes, 3 passes of 26 minibatches at lr 1.3e-3 (for 16 workers).",
)
@_config_options()
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    cls=_GroupedOption,
    group="run",
    help="Print only errors and the final summary.",
)
@click.pass_context
def train_command(
    ctx: click.Context,
    resume: bool,
    quiet: bool,
    env_args: tuple[str, ...],
    preset: str | None,
    **options: Any,
) -> None:
    """Train a policy; Ctrl-C or SIGTERM saves a checkpoint and stops (exit 130 / 143).

    \b
    Examples:
      pong-mp train                                # real Pong on all CPUs, until Ctrl-C
                                                   # (the actor-critic, --policy conv)
      pong-mp train --resume                       # continue the run in runs/pong
      pong-mp train --target-reward 18 --run-dir runs/solve      # until solved
      pong-mp train --preset karpathy --run-dir runs/karpathy    # pg-pong exactly
      pong-mp train --preset pg --run-dir runs/pg  # Karpathy's learner at lr 1e-3
      pong-mp train --fork-from runs/pong --lr 5e-4 --run-dir runs/lower-lr   # a branch
      pong-mp train --env FakePong-v0 --batches 50 --run-dir runs/fake   # seconds
    """
    # Only typed options count: a new run takes the others' defaults, a resume or a fork
    # its run's.
    given = {n: v for n, v in options.items() if ctx.get_parameter_source(n) is not _DEFAULT}
    if env_args:
        given["env_kwargs"] = _parse_env_args(env_args)
    run_dir = Path(options["run_dir"])
    # A stop signal is Interrupted from here to the exit, the checks included: the trainer's
    # own handlers, on their way out, give these back rather than Python's default.
    signals.raise_stop_signals()
    try:
        given = config.apply_preset(preset, given, explicit=set(given))
        with open_run(options["run_dir"], resume, given) as (cfg, state):
            _closed_stdout_as_gone()  # an env module's import may have set it to None
            reporter = make_reporter(quiet, state.batch, cfg.batches)
            try:
                state = run(cfg, state, resumed=resume, reporter=reporter)
            except FileError as exc:
                # The run had started: it failed (exit 1), its last good checkpoint is kept.
                _fail(f"{exc}; {_kept(run_dir)}", EXIT_ERROR)
            except MemoryError:
                _fail(f"out of memory (--hidden {cfg.hidden} may be too large)", EXIT_ERROR)
    except (config.ConfigError, RunDirError, CheckpointError, BackendUnavailable, FileError) as exc:
        _fail(str(exc), EXIT_USAGE)
    except signals.Interrupted as exc:
        # All is saved: a further Ctrl-C must not turn this clean exit into a death by signal.
        signals.ignore_stop_signals()
        # Named from the disk: a second Ctrl-C may have cut the last save short, and a stop
        # while the workers start has saved nothing.
        where, resumable = where_it_stands(run_dir, exc.reached)
        hint = ", continue with --resume" * resumable
        _exit_stopped(f"pong-mp: stopped by {exc}; {where}{hint}", exc.exit_code)
    except (WorkerError, NonFiniteError) as exc:
        _failed(exc, f"; {_kept(run_dir)}")
    running = "n/a" if state.running_reward is None else f"{state.running_reward:.2f}"
    reached = f"target {cfg.target_reward:g} reached; " if reached_target(cfg, state) else ""
    done = (
        f"done: {reached}{state.batch} updates, {state.episodes} episodes, "
        f"{state.steps:,} steps, running reward {running}, in {options['run_dir']}"
    )
    try:
        _echo_or_stop(f"pong-mp: {done}")
    except signals.Interrupted as exc:  # -q's only line, to a closed stdout: said on stderr
        signals.ignore_stop_signals()
        _exit_stopped(f"pong-mp: stopped by {exc} at its last line; {done}", exc.exit_code)


@main.command("play")
@click.argument(
    "checkpoint_path", metavar="CHECKPOINT|MODEL|RUN_DIR", type=click.Path(path_type=Path)
)
@click.option(
    "--env", help=f"Env to play: {SUPPORTED} (default: the one the policy was trained on)."
)
@click.option("--episodes", type=click.IntRange(min=1), default=3, help="Games to play.")
@click.option("--seed", type=click.IntRange(min=0), default=0, help="Seed of the games.")
@click.option(
    "--env-arg",
    "env_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="Env argument, VALUE as JSON (fast=false: gymnasium's own ALE env); repeatable.",
)
@click.option("--greedy", is_flag=True, help="Take the likelier action instead of sampling.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (for scripts).")
@click.option(
    "--record",
    type=_FileToWrite(path_type=Path),
    metavar="FILE.gif|FILE.mp4",
    help="Write the games as a video.",
)
@click.option(
    "--scale",
    type=click.IntRange(min=1, max=8),
    default=3,
    help="Upscaling of the recorded frames.",
)
@click.option(
    "--frame-stride",
    # A GIF holds a frame at most 655 s (a 16-bit count of 10 ms): 1,000 steps are 67 s.
    type=click.IntRange(min=1, max=1000),
    default=1,
    help="Record one frame in this many (the video still plays at the game's speed).",
)
@click.option(
    "--max-frames",
    type=click.IntRange(min=1),
    help="End the clip after this many recorded frames (the games are still played out).",
)
@_stoppable
def play_command(
    checkpoint_path: Path,
    env: str | None,
    env_args: tuple[str, ...],
    episodes: int,
    seed: int,
    greedy: bool,
    as_json: bool,
    record: Path | None,
    scale: int,
    frame_stride: int,
    max_frames: int | None,
) -> None:
    """Play full games with a checkpoint's or model's policy and report the scores (a run
    directory stands for its checkpoint.npz).

    \b
    Examples:
      pong-mp play models/pong.npz --episodes 10
      pong-mp play models/pong.npz --episodes 10 --greedy --json
      pong-mp play models/pong.npz --episodes 10 --env-arg fast=false   # gymnasium's own env
      pong-mp play models/pong.npz --episodes 1 --record game.gif --max-frames 1500
    """
    with _usage_errors(CheckpointError, UnknownEnvError, FileError, ValueError, OSError):
        with signals.at_once():  # a file of many members may take minutes: nothing to save
            params, stored = load_policy(checkpoint_path)
        trained_on = stored.get("env", "ALE/Pong-v5")
        env_id = env or trained_on
        env_kwargs = stored.get("env_kwargs", {}) if env is None else {}
        env_kwargs = {**env_kwargs, **_parse_env_args(env_args)}
        with _env_prints(as_json):
            check_env(env_id, env_kwargs)
        recorder = (
            VideoRecorder(record, scale=scale, stride=frame_stride, max_frames=max_frames)
            if record is not None
            else None
        )
    if env_id != trained_on:
        click.echo(
            f"pong-mp: warning: this policy was trained on {trained_on}, not {env_id}; "
            "expect it to play badly",
            err=True,
        )
    played: list[GameScore] = []

    def on_game(score: GameScore) -> None:
        played.append(score)
        if not as_json:
            _echo_or_stop(
                f"game {len(played)}: agent {score.agent} - {score.opponent} opponent "
                f"({score.steps:,} steps)"
            )

    played_all = False
    try:
        with _recording(recorder) as on_frame, _env_prints(as_json):
            scores = play_games(
                params,
                stored_shape(stored),
                env_id,
                episodes,
                seed=seed,
                greedy=greedy,
                env_kwargs=env_kwargs,
                on_frame=on_frame,
                on_game=on_game,
            )
            played_all = True
    except BaseException as exc:  # the env's code may raise anything
        if isinstance(exc, KeyboardInterrupt | signals.Interrupted):
            raise  # a stop, ended by _stoppable
        if played_all or isinstance(exc, _RecordingFailed):
            # A frame the recording could not write (a full disk, ffmpeg), or its close.
            _fail(f"recording to {record} failed: {first_line(exc) or type(exc).__name__}",
                  EXIT_ERROR)
        pass_stops(exc)  # the env's print to a closed standard output
        # What the env gave (or raised, or exited with) broke the game, as a worker's env
        # breaks a training run (exit 1); the env was made and checked before.
        _fail(f"{env_id} failed while playing: {what_it_did(exc)}", EXIT_ERROR)
    recorded = {} if recorder is None else {"recorded_frames": recorder.frames}
    if as_json:
        report = {
            "policy": str(checkpoint_path),
            "env": env_id,
            "env_kwargs": env_kwargs,
            "greedy": greedy,
            "seed": seed,
            **evaluation(scores),
            **recorded,
        }
        _echo_or_stop(json.dumps(report, indent=2))
        return
    _echo_or_stop(summary(scores) + (" (greedy)" if greedy else " (sampled)"))
    if recorder is not None:
        _echo_or_stop(f"recorded {recorder.frames:,} frames to {record}")


class _RecordingFailed(Exception):
    """A frame the recording could not take."""


@contextlib.contextmanager
def _recording(recorder: VideoRecorder | None) -> Iterator[Callable[[Any], None] | None]:
    """What takes each frame for `recorder` (None: no recording), whose frames are counted on
    stderr while a terminal watches (nothing in a pipe); the recording is closed when the
    block ends well, else aborted."""
    if recorder is None:
        yield None
        return
    from tqdm import tqdm

    progress = tqdm(
        total=recorder.max_frames,
        unit=" frames",
        file=sys.stderr,
        leave=False,
        desc=f"recording {recorder.path.name}",
        disable=not sys.stderr.isatty(),
    )

    def on_frame(frame: Any) -> None:
        before = recorder.frames
        try:
            recorder.add(frame)
        except (OSError, RuntimeError, ValueError) as exc:
            raise _RecordingFailed(str(exc) or type(exc).__name__) from exc
        if recorder.frames > before:
            progress.update(1)

    with recorder, progress:
        yield on_frame


@main.command("export")
@click.argument("checkpoint_path", metavar="CHECKPOINT|RUN_DIR", type=click.Path(path_type=Path))
@click.argument("out", metavar="MODEL.npz", type=_FileToWrite(path_type=Path))
@_stoppable
def export_command(checkpoint_path: Path, out: Path) -> None:
    """Write a checkpoint's (or run directory's) policy as a float32 model file for play."""
    with _usage_errors(CheckpointError, FileError):
        if out.is_dir():
            raise FileError(f"{out} is a directory; name the model file to write")
        export_model(checkpoint_path, out)
    click.echo(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")


@main.command("plot")
@click.argument(
    "run_dirs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
@click.option(
    "-o",
    "--output",
    type=_FileToWrite(path_type=Path),
    help="PNG to write (default: RUN_DIR/learning.png for one run, compare.png for several).",
)
@click.option(
    "--milestones",
    is_flag=True,
    help="Also print when the running reward first reached "
    + ", ".join(f"{t:+g}" if t else "0" for t in plot.THRESHOLDS)
    + ", for each run and setting; with --after-update or a step range, the mean reward per "
    "update within it; with --after-update and several runs, each one's difference from "
    "the first, update by update.",
)
@click.option(
    "--rate",
    type=_FiniteRange(min=1, max=1e8),  # a table of 300-digit minutes helps nobody
    metavar="STEPS_PER_SEC",
    help="With --milestones, also convert env steps to wall time at this training rate "
    "(steps/s, as `pong-mp bench` measures it).",
)
@click.option(
    "--min-steps",
    type=_FiniteRange(min=0),
    metavar="STEPS",
    help="Draw only the updates from this many env steps on (e.g. 21e6: after a fork); "
    "--milestones adds a table of them (the milestones still cover whole runs).",
)
@click.option(
    "--max-steps",
    type=_FiniteRange(min=0, min_open=True),
    metavar="STEPS",
    help="Draw only the updates up to this many env steps.",
)
@click.option(
    "--after-update",
    type=click.IntRange(min=0),
    metavar="N",
    help="Draw only the updates after update N (e.g. the forks' checkpoint); --milestones "
    "adds a table of them, as with --min-steps.",
)
@_stoppable
def plot_command(
    run_dirs: tuple[Path, ...],
    output: Path | None,
    milestones: bool,
    rate: float | None,
    min_steps: float | None,
    max_steps: float | None,
    after_update: int | None,
) -> None:
    """Plot a run's learning curve and speed, or compare several runs (a setting's seeds as a
    mean curve with its spread), even while they run."""
    if output is None:
        output = Path(run_dirs[0]) / "learning.png" if len(run_dirs) == 1 else Path("compare.png")
    if min_steps is not None and max_steps is not None and min_steps >= max_steps:
        _fail(f"--min-steps {min_steps:g} must be below --max-steps {max_steps:g}", EXIT_USAGE)
    resolved = [os.path.realpath(run_dir) for run_dir in run_dirs]
    for index, where in enumerate(resolved):
        if where in resolved[:index]:
            first = run_dirs[resolved.index(where)]
            _fail(f"{first} and {run_dirs[index]} are the same run: name each once", EXIT_USAGE)
    try:
        # Read once: a live run's plot and table then show the same updates.
        runs = [(Path(run_dir), plot.read_metrics(run_dir)) for run_dir in run_dirs]
        plot.check_output(output)
        for run_dir, records in runs:
            nulls = sum(r["running_reward"] is None for r in records)
            if nulls:
                # Valid, but no trainer writes one today: worth a word, not a refusal.
                _say(
                    f"pong-mp: note: {run_dir}: {nulls} update{'s' * (nulls != 1)} with a null "
                    "running reward (no episode finished yet), drawn as a gap"
                )
        several = len(runs) > 1
        tables = [
            plot.milestones_table(records, title=str(run_dir) if several else None, rate=rate)
            for run_dir, records in runs
        ]
        if several:
            tables.append(plot.settings_table(runs, rate=rate))
        drawn = [
            (run_dir, plot.within_steps(records, min_steps, max_steps, run_dir, after_update))
            for run_dir, records in runs
        ]
        if (min_steps, max_steps, after_update) != (None, None, None):
            tables.append(plot.range_table(drawn))
        if after_update is not None and len(drawn) > 1:
            origins = [plot.fork_origin(records, after_update) for _, records in runs]
            tables.append(plot.paired_table(drawn, origins))
        if len(drawn) == 1:
            plot.plot_run(drawn[0][0], output, drawn[0][1])
        else:
            plot.plot_runs(drawn, output)
    except (plot.PlotError, FileError) as exc:
        _fail(str(exc), _input_or_disk(exc))
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror or exc}", _input_or_disk(exc))
    click.echo(f"wrote {output}")
    if milestones:
        click.echo("\n\n".join(tables))


@main.command("bench", cls=_GroupedCommand)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=config.default_workers,
    show_default="number of CPUs",
    help="Processes for the raw and training runs.",
)
@click.option(
    "--seconds",
    type=_FiniteRange(min=1, max=86400),
    default=10.0,
    help="Length of each measurement (the whole bench takes about 6x this).",
)
@click.option("--env", default="ALE/Pong-v5", help="Env id to measure.")
@click.option(
    "--scaling",
    is_flag=True,
    help="Instead: training against raw for 1, 2, 4, ... and --workers workers.",
)
@click.option(
    "--simulate",
    type=_FiniteRange(min=0.0005, max=0.1),
    metavar="STEP_SECONDS",
    help="Instead: training on FakePong-v0 whose every step takes STEP_SECONDS more, slept "
    "(no CPU), "
    "for 1, 2, 4, ... and --workers workers: the speed-up that the orchestration allows, "
    "with many workers on few cores (e.g. --simulate 0.002 --workers 32 --batch-size 32).",
)
@click.option(
    "--project",
    is_flag=True,
    help="Instead: measure the parts of an actor-critic update here (from --model's weights: "
    "a trained agent's long episodes) and project training against raw for 1 to 64 workers "
    "(with --simulate: on its sleeping FakePong-v0).",
)
@click.option(
    "--model",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Train from this model or checkpoint's weights: a trained agent's long episodes.",
)
@click.option(
    "--compare-envs",
    "compare_envs_only",
    is_flag=True,
    help="Instead: FakePong-v0's raw speed against --env's, in alternating --rounds of "
    "--seconds each, in one process.",
)
@click.option(
    "--rounds", type=click.IntRange(min=1), default=3, help="Rounds per env of --compare-envs."
)
@click.option(
    "--preset",
    type=click.Choice(sorted(config.PRESETS)),
    help="The training runs' --preset: its options where the training options below are not "
    "given (pg: the learner of the 1.00x figures).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead.")
@_config_options(bench.BENCH_GROUPS)
@click.pass_context
@_stoppable
def bench_command(
    ctx: click.Context,
    workers: int,
    seconds: float,
    env: str,
    scaling: bool,
    simulate: float | None,
    project: bool,
    model: Path | None,
    compare_envs_only: bool,
    rounds: int,
    preset: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Measure training speed against the emulator's raw speed, overhead and memory (training
    with `pong-mp train`'s learner, policy and schedule options)."""

    # --simulate alone is a measurement; with --project, the env that projection uses
    modes = {"--scaling": scaling, "--simulate": simulate is not None and not project,
             "--project": project, "--compare-envs": compare_envs_only}
    if sum(modes.values()) > 1:
        given_modes = " and ".join(name for name, on in modes.items() if on)
        _fail(f"{given_modes} are separate measurements: give one at a time", EXIT_USAGE)
    given = {name for name in options if ctx.get_parameter_source(name) is not _DEFAULT}
    net = [f.name for f in dataclasses.fields(config.TrainConfig)
           if f.metadata["group"] == "policy" and f.name in given]
    if model is not None and net:
        _fail(f"--model brings its own network: leave out --{net[0]}", EXIT_USAGE)
    if not compare_envs_only and ctx.get_parameter_source("rounds") is not _DEFAULT:
        _fail("--rounds counts the rounds of --compare-envs: give it with that", EXIT_USAGE)

    def measure() -> tuple[Any, Callable[[Any], str]]:
        """The measurement asked for, and what formats its results as text."""
        with _usage_errors(UnknownEnvError, CheckpointError):
            check_env(env, {})
            # A bad file is one line now, not after the raw runs.
            if model is not None:
                load_policy(model)
        if compare_envs_only:
            if env == FAKE_PONG_ID:
                _fail("--compare-envs measures FakePong-v0 against --env: name another", EXIT_USAGE)
            comparison = bench.compare_envs((env, FAKE_PONG_ID), seconds, rounds)
            return comparison, bench.format_env_comparison
        setup = bench.TrainingSetup(model, **config.apply_preset(preset, options, explicit=given))
        with _usage_errors(config.ConfigError):
            # A bad mix is one line now, not after the raw runs.
            bench.training_config(env, workers, setup)
        if project:
            env_id, env_kwargs = (
                (FAKE_PONG_ID, bench.simulated_env(simulate)) if simulate is not None else (env, {})
            )
            measured, params = bench.training_config(env_id, 1, setup, env_kwargs)
            if measured.algo != "ppo":
                _fail("--project models the actor-critic (--algo ppo)", EXIT_USAGE)
            costs = measure_costs(measured, params)
            rows = run_projection(costs, measured.batch_size, measured.epochs)
            results = {
                "env": env_id, "env_kwargs": env_kwargs, **setup.describe(),
                "costs": dataclasses.asdict(costs), "rows": rows, **bench.where_measured(),
            }
            return results, lambda _: format_projection(costs, rows)
        elif simulate is not None:
            return bench.run_simulation(workers, seconds, simulate, setup), bench.format_simulation
        elif scaling:
            return bench.run_scaling(workers, seconds, env, setup), bench.format_scaling
        else:
            return run_bench(workers, seconds, env, setup), format_bench

    try:
        with _env_prints(as_json):
            results, format_results = measure()
    except (WorkerError, NonFiniteError) as exc:  # the env failed in the training runs
        _failed(exc)
    click.echo(json.dumps(results, indent=2) if as_json else format_results(results))
