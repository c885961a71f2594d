"""Checkpoints: atomic save (temp file, fsync, rename) and validated load.

A checkpoint is an .npz that loads with allow_pickle=False. It holds W1 and W2 (the keys
users rely on) and everything exact resume needs: the optimizer's state (`rmsprop_W1`, ...,
and Adam's `adam_m_W1`, ...), the update, episode and step counters, the running reward, the
wall time so far, the run's config as JSON and, with a policy lag L, the float32 weights of
the L updates before (lag_W1, lag_W2: L x H x 6400 and L x H) that the batches in flight use.
A value head (--algo ppo) is `value` (with `rmsprop_value`, `adam_m_value`). A --policy conv
run's W1 is H x (19 x 19 x channels), one column per feature of its convolutional layer,
whose filters are `conv` (8 x 8 x channels; `rmsprop_conv`, `adam_m_conv`); a model file of
one holds `conv` too. After a fork widened an Adam run's hidden layer, `late_units` (N x 2:
the first unit each widening added, and the optimizer steps then) tells Adam where those
units' step counts start.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from pong_mp import config, policy
from pong_mp.files import path_too_long, write_atomic
from pong_mp.state import TrainState

CHECKPOINT_FILE = "checkpoint.npz"
"""A run directory's checkpoint: what `load_policy` reads when given the directory."""

FORMAT_VERSION = 2
"""The newest format this pong-mp reads. 2 added `late_units` (after a fork widened an Adam
run's hidden layer); a file without them is written as 1, which older versions read too."""


class CheckpointError(ValueError):
    """A checkpoint is missing, damaged or does not fit the run."""


MAX_ARRAY_BYTES = max(
    # W1 (and each optimizer state of it) of the widest policy, in float64
    config.MAX_HIDDEN
    * policy.input_rows(policy.NetShape(config.MAX_HIDDEN, config.MAX_CHANNELS))
    * 8,
    # the MLP's weights in flight with the longest policy lag, in float32
    config.MAX_POLICY_LAG * config.MAX_HIDDEN * policy.INPUT_SIZE * 4,
)
"""The largest array a checkpoint or model file of pong-mp's limits holds (839 MB): what an
array's header in such a file may claim."""

MAX_FILE_BYTES = 4 * MAX_ARRAY_BYTES
"""What all the arrays of one file may claim together: W1 with its two optimizer states and
the weights in flight, at most."""


_SCALARS = ("batch", "episodes", "steps", "elapsed")

_PREFIXES = ("", "rmsprop_", "adam_m_")
"""The flat vectors a checkpoint holds, by the prefix of their arrays' names: the weights,
the optimizer's cache, Adam's first moment (Adam only)."""

MEMBERS = frozenset(
    [prefix + key for prefix in _PREFIXES for key in ("W1", "W2", "value", "conv")]
    + ["lag_W1", "lag_W2", *_SCALARS, "optimizer_steps", "running_reward", "config", "run"]
    + ["late_units", "format_version"]
)
"""The arrays a checkpoint or model file may hold; a reader loads no other."""

MAX_COUNT = 2**53
"""The most a checkpoint's counters (updates, episodes, env steps, optimizer steps) may say:
far past what any run reaches, and still exact as a float and in int64 arithmetic."""


def save(path: Path, state: TrainState, shape: policy.NetShape, config_json: str) -> None:
    """Write `state` to `path` atomically: a reader sees the old file or the new, never half."""
    flats = {"": state.params, "rmsprop_": state.cache}
    if state.momentum is not None:
        flats["adam_m_"] = state.momentum
    for name, flat in zip(("params", "cache", "momentum"), flats.values(), strict=False):
        if not np.all(np.isfinite(flat)):
            raise CheckpointError(f"refusing to save non-finite {name} to {path}")
    arrays: dict[str, np.ndarray] = {}

    def put(prefix: str) -> None:
        # Internally W1 is kept transposed (see policy.py); files hold it as H x 6400.
        w1t, w2 = policy.split(flats[prefix], shape)
        arrays[prefix + "W1"], arrays[prefix + "W2"] = np.ascontiguousarray(w1t.T), w2

    put("")
    put("rmsprop_")
    arrays.update(
        batch=np.int64(state.batch),
        episodes=np.int64(state.episodes),
        steps=np.int64(state.steps),
        elapsed=np.float64(state.elapsed),
        optimizer_steps=np.int64(state.optimizer_steps),
        running_reward=np.float64(
            np.nan if state.running_reward is None else state.running_reward
        ),
        config=np.str_(config_json),
        format_version=np.int64(2 if state.late_units else 1),
    )
    if state.late_units:
        arrays["late_units"] = np.array(state.late_units, np.int64)
    if state.momentum is not None:
        put("adam_m_")
    if state.lagged:
        views = [policy.split(flat, shape) for flat in state.lagged]
        arrays["lag_W1"] = np.stack([w1t.T for w1t, _ in views])
        arrays["lag_W2"] = np.stack([w2 for _, w2 in views])
    # ppo's value head and --policy conv's filters (neither has a policy lag)
    for key, part in (("value", policy.value_head), ("conv", policy.conv_kernel)):
        if part(state.params, shape) is not None:
            for prefix, flat in flats.items():
                arrays[prefix + key] = part(flat, shape)
    write_atomic(Path(path), lambda fh: np.savez(fh, **arrays))


def load(path: Path) -> tuple[TrainState, dict]:
    """Read and validate a checkpoint: (state, config dict). CheckpointError names the problem."""
    path = Path(path)
    data = read_arrays(path)
    try:
        if "W1" in data and "rmsprop_W1" not in data and "config" in data:
            raise CheckpointError("a model file, not a checkpoint: it has no optimizer state")
        return _validate(data)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def read_arrays(path: Path, keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The arrays `keys` (None: all) of a checkpoint or model file, or of a run directory's
    checkpoint, read once; CheckpointError (a ValueError) if it is missing or damaged."""
    try:
        path = _checkpoint_file(path)
    except OSError as exc:  # a path too long for the file system, a directory not searchable
        too_long = exc.errno == errno.ENAMETOOLONG
        said = str(path_too_long(exc)) if too_long else f"{path}: cannot read it ({exc.strerror})"
        raise CheckpointError(said) from None
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if magic == b"\x93NUMPY":  # a .npy holds one bare array
        raise CheckpointError(f"{path}: not a pong-mp checkpoint or model (.npz)")
    if not magic.startswith(b"PK"):
        raise CheckpointError(f"{path}: damaged checkpoint (not an .npz file)")
    try:
        # One open file for the check and the load: a checkpoint replaced (renamed over)
        # in between must not be loaded unchecked.
        with open(path, "rb") as fh:
            problem = claims_problem(fh)
            if problem is None:
                fh.seek(0)
                with np.load(fh, allow_pickle=False) as npz:
                    # Members pong-mp never writes stay packed: they may hold anything.
                    names = [key for key in npz.files if key in MEMBERS] if keys is None else keys
                    return {key: npz[key] for key in names}
    except (
        OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError,
        NotImplementedError, RuntimeError,  # zipfile's: a compression it lacks, encryption
        TypeError, OverflowError,  # numpy's, from a header it took that the check did not
    ) as exc:  # fmt: skip
        problem = str(exc)
    raise CheckpointError(f"{path}: damaged checkpoint ({problem})")


def _checkpoint_file(path: Path) -> Path:
    # The regular file that `path` names, or its directory's checkpoint; CheckpointError if
    # there is none.
    if path.is_dir():  # a run directory stands for its checkpoint
        if not os.path.lexists(path / CHECKPOINT_FILE):
            raise CheckpointError(f"{path}: a directory with no {CHECKPOINT_FILE} in it")
        path = path / CHECKPOINT_FILE
    if not path.is_file():
        if path.exists():  # a FIFO, a device: a read could wait for ever
            raise CheckpointError(f"{path}: not a regular file")
        if path.is_symlink():
            raise CheckpointError(f"{path}: a symbolic link that leads to no file")
        raise CheckpointError(f"{path}: no such checkpoint")
    return path


def claims_problem(fh: BinaryIO) -> str | None:
    """What is wrong with the sizes an open .npz's arrays claim in their headers (None:
    nothing), read before numpy allocates them (a few bytes may claim petabytes): a claim
    beyond what its zip member holds, or beyond MAX_ARRAY_BYTES an array, MAX_FILE_BYTES in
    all; or a member named twice. Raises ValueError or zipfile.BadZipFile for a file that is
    not an .npz of arrays."""
    total, names = 0, set()
    with zipfile.ZipFile(fh) as archive:
        for member in archive.infolist():
            # numpy names "W1" and "W1.npy" both W1 and takes the last, other readers the first
            name = member.filename.removesuffix(".npy")
            if name in names:
                return f"it holds {name} twice"
            names.add(name)
            with archive.open(member) as data:
                try:
                    version = np.lib.format.read_magic(data)
                except ValueError:  # numpy would hand its bytes back as they are
                    return f"{member.filename} is not a .npy array"
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(data)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(data)
                else:  # 3.0 is for field names beyond latin-1, which pong-mp never writes
                    return f"{member.filename} is in .npy format {version}, not 1.0 or 2.0"
                if any(type(n) is not int for n in shape):  # numpy lets True through
                    return f"{member.filename} claims a shape of {shape}"
                claimed = math.prod(shape) * dtype.itemsize
                held = member.file_size - data.tell()
            what = f"{member.filename} claims {dtype} {shape}, {claimed:,} bytes"
            if claimed > held:
                return f"{what}, more than the {held:,} it holds"
            if claimed > MAX_ARRAY_BYTES:
                return f"{what}, more than any array of a pong-mp policy ({MAX_ARRAY_BYTES:,})"
            # Beside a 0, or of a dtype of 0 bytes: numpy's reshape would overflow.
            if max(shape, default=0) * max(dtype.itemsize, 1) > MAX_ARRAY_BYTES:
                return f"{member.filename} claims {dtype} {shape}: no pong-mp array is that long"
            total += claimed
    if total > MAX_FILE_BYTES:
        return f"its arrays claim {total:,} bytes, more than a pong-mp file holds"
    return None


def _shape_of(data: dict[str, np.ndarray]) -> policy.NetShape:
    # The shape of the policy in W1 and W2, on the channels of the stored config.
    w1, w2 = data["W1"], data["W2"]
    shape = policy.NetShape(w1.shape[0] if w1.ndim else 0, _conv_of(data))
    if not 1 <= shape.hidden <= config.MAX_HIDDEN:
        raise CheckpointError(f"W1 has {shape.hidden} hidden units, not 1 to {config.MAX_HIDDEN}")
    rows = policy.input_rows(shape)
    if w1.ndim != 2 or w1.shape[1] != rows or w2.shape != (shape.hidden,):
        raise CheckpointError(f"W1/W2 have shapes {w1.shape}/{w2.shape}, not (H, {rows})/(H,)")
    return shape


def _conv_of(data: dict[str, np.ndarray]) -> int:
    # --policy conv's channels as the stored config gives them, to know W1's shape before
    # the config is checked: 0 where they are malformed (the check that follows names it).
    # A run of an option pong-mp no longer has is named first: its weights fit no policy
    # of today's.
    try:
        stored = config.parse_json(str(data["config"]))
        channels = config.stored_conv_channels(stored)
    except (ValueError, TypeError, AttributeError, KeyError):
        return 0
    try:
        config.without_removed(stored)
    except config.ConfigError as exc:
        raise CheckpointError(str(exc)) from None
    ok = isinstance(channels, int) and not isinstance(channels, bool)
    return channels if ok and 1 <= channels <= config.MAX_CHANNELS else 0


def _tails(
    data: dict[str, np.ndarray],
    prefixes: tuple[str, ...],
    shape: policy.NetShape,
    dtype: type,
    value_head: bool,
) -> list[np.ndarray]:
    # What follows W1 and W2 in the flat float64 vector of each prefix (the weights, the
    # optimizer's states): the value head if `value_head`, then --policy conv's filters.
    parts = (  # key, shape, the kind of run that has it (None: not this one)
        ("value", (shape.hidden + 1,), "a run with a value head" if value_head else None),
        ("conv", policy.kernel_shape(shape), "this --policy conv run" if shape.channels else None),
    )
    columns = [
        [_checked(data, prefix + key, size, dtype, needs).ravel() for prefix in prefixes]
        for key, size, needs in parts
        if needs is not None
    ]
    rows = zip(*columns, strict=True) if columns else [()] * len(prefixes)
    return [np.concatenate([np.empty(0), *row]) for row in rows]


def _checked(
    data: dict[str, np.ndarray], key: str, shape: tuple[int, ...], dtype: type, needs: str
) -> np.ndarray:
    # Array `key`, which `needs` (a kind of run) needs: present, of `shape` and `dtype`, finite.
    if key not in data:
        raise CheckpointError(f"missing {key}, which {needs} needs")
    if data[key].shape != shape or data[key].dtype != dtype:
        found = f"{data[key].dtype} {data[key].shape}"
        raise CheckpointError(f"{key} is {found}, not {np.dtype(dtype)} {shape}")
    _check_finite(data, (key,))
    return data[key]


def _check_finite(data: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
    for key in keys:
        if data[key].dtype.kind != "f":
            raise CheckpointError(f"{key} holds {data[key].dtype} values, not floats")
        if not np.all(np.isfinite(data[key])):
            raise CheckpointError(f"{key} holds non-finite values")
        # Workers play float32 copies: a float64 1e300 would play as inf.
        if data[key].size and np.max(np.abs(data[key])) > np.finfo(np.float32).max:
            raise CheckpointError(f"{key} holds values beyond float32's range")


def _check_format(data: dict[str, np.ndarray]) -> None:
    # Files from before the field are of the first format.
    field = data.get("format_version", np.int64(FORMAT_VERSION))
    version = field.item() if field.shape == () else field.tolist()
    if isinstance(version, bool) or not isinstance(version, int):  # True == 1
        raise CheckpointError(f"format_version {version!r} is not a whole number")
    if not 1 <= version <= FORMAT_VERSION:
        raise CheckpointError(
            f"format_version {version!r} is not one this pong-mp reads (1 to {FORMAT_VERSION};"
            " a newer pong-mp wrote it?)"
        )


def _check_config(stored: object, hidden: int) -> None:
    if not isinstance(stored, dict) or stored.get("hidden") != hidden:
        raise CheckpointError(f"its config does not match its weights (hidden {hidden})")
    try:
        config.check_types(stored)
    except config.ConfigError as exc:
        raise CheckpointError(f"bad config ({exc})") from None
    if config.stored_option(stored, "policy") not in config.POLICIES:
        raise CheckpointError(f"bad config (policy {stored['policy']!r} is no pong-mp policy)")


def _validate(data: dict[str, np.ndarray]) -> tuple[TrainState, dict]:
    required = ("W1", "W2", "rmsprop_W1", "rmsprop_W2", "running_reward", "config", *_SCALARS)
    missing = [key for key in required if key not in data]
    if missing:
        raise CheckpointError(f"missing {', '.join(missing)}")
    shape = _shape_of(data)
    if ("adam_m_W1" in data) != ("adam_m_W2" in data):
        raise CheckpointError("holds only one of adam_m_W1 and adam_m_W2")
    prefixes = _PREFIXES if "adam_m_W1" in data else _PREFIXES[:2]
    state_keys = tuple(prefix + w for prefix in prefixes[1:] for w in ("W1", "W2"))
    for key in state_keys:
        like = data[key[-2:]]
        if data[key].shape != like.shape:
            raise CheckpointError(f"{key} has shape {data[key].shape}, not {like.shape}")
    for key in ("W1", "W2", *state_keys):
        if data[key].dtype != np.float64:
            raise CheckpointError(f"{key} has dtype {data[key].dtype}, not float64")
        _check_finite(data, (key,))
    try:
        stored = config.parse_json(str(data["config"]))
        scalars = {key: data[key].item() for key in _SCALARS}
        running = float(data["running_reward"])
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"bad counters or config ({exc})") from None
    if np.isinf(running):  # NaN is none yet
        raise CheckpointError(f"running_reward must be finite, not {running}")
    for key, value in scalars.items():
        if not isinstance(value, int | float) or not np.isfinite(value) or value < 0:
            raise CheckpointError(f"{key} must be a number >= 0, not {value!r}")
        if key != "elapsed":
            _check_count(key, value)
    if not scalars["batch"] <= scalars["episodes"] <= scalars["steps"]:  # each has one or more
        raise CheckpointError(
            "counters out of order: an update has episodes, an episode steps (batch "
            f"{scalars['batch']}, episodes {scalars['episodes']}, steps {scalars['steps']})"
        )
    _check_format(data)
    _check_config(stored, shape.hidden)
    lagged = _lagged(data, stored, data["W1"].shape)
    tails = _tails(data, prefixes, shape, np.float64, config.stored_value_head(stored))
    params, cache, *momentum = (
        np.concatenate([policy.join(data[prefix + "W1"], data[prefix + "W2"]), tail])
        for prefix, tail in zip(prefixes, tails, strict=True)
    )
    state = TrainState(
        params=params,
        cache=cache,
        batch=int(scalars["batch"]),
        episodes=int(scalars["episodes"]),
        steps=int(scalars["steps"]),
        elapsed=float(scalars["elapsed"]),
        running_reward=None if np.isnan(running) else running,
        momentum=momentum[0] if momentum else None,
        lagged=lagged,
        optimizer_steps=_optimizer_steps(data, stored, int(scalars["batch"])),
    )
    return dataclasses.replace(state, late_units=_late_units(data, shape.hidden, state)), stored


def _late_units(
    data: dict[str, np.ndarray], hidden: int, state: TrainState
) -> tuple[tuple[int, int], ...]:
    # (first unit, optimizer steps then) a widening, in order: after Adam's steps, inside
    # the layer.
    if "late_units" not in data:
        return ()
    late = data["late_units"]
    if late.dtype != np.int64 or late.ndim != 2 or late.shape[1:] != (2,) or not len(late):
        raise CheckpointError(f"late_units is {late.dtype} {late.shape}, not int64 (N, 2)")
    firsts, sinces = late[:, 0].tolist(), late[:, 1].tolist()
    if state.momentum is None:
        raise CheckpointError("late_units in a checkpoint without Adam's state")
    if firsts != sorted(set(firsts)) or not (firsts[0] > 0 and firsts[-1] < hidden):
        raise CheckpointError(f"late_units' units {firsts} are not increasing in 1..{hidden - 1}")
    if sinces != sorted(sinces) or not (sinces[0] > 0 and sinces[-1] <= state.optimizer_steps):
        raise CheckpointError(
            f"late_units' steps {sinces} are not in order (equal allowed) in "
            f"1..{state.optimizer_steps}"
        )
    return tuple(zip(firsts, sinces, strict=True))


def _optimizer_steps(data: dict[str, np.ndarray], stored: dict, batch: int) -> int:
    # A checkpoint written before the state counted them took one step an update (pg) or
    # one a minibatch (ppo) since its run began.
    if "optimizer_steps" not in data:
        if config.stored_option(stored, "algo") != "ppo":
            return batch
        passes = config.stored_option(stored, "epochs")
        return batch * passes * config.stored_option(stored, "minibatches")
    steps = data["optimizer_steps"].item() if data["optimizer_steps"].size == 1 else None
    _check_count("optimizer_steps", steps)
    return steps


def _check_count(key: str, value: object) -> None:
    # bool is an int to Python, and a float count came from no pong-mp
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise CheckpointError(f"{key} must be a whole number from 0 to 2**53, not {value!r}")


def _lagged(data: dict[str, np.ndarray], stored: dict, shape: tuple[int, ...]) -> tuple:
    # The weights of the batches in flight: L of them for a run with --policy-lag L.
    lag = config.stored_option(stored, "policy_lag")
    if not lag:
        return ()
    needs = f"a run with --policy-lag {lag}"
    lag_w1 = _checked(data, "lag_W1", (lag, *shape), np.float32, needs)
    lag_w2 = _checked(data, "lag_W2", (lag, shape[0]), np.float32, needs)
    return tuple(
        np.concatenate([np.ascontiguousarray(w1.T).ravel(), w2])
        for w1, w2 in zip(lag_w1, lag_w2, strict=True)
    )


_MACHINE_FIELDS = ("run_dir", "ray_address")
"""Config fields that name where a run lived: a model file leaves them out."""


def export_model(checkpoint_path: Path, out: Path) -> Path:
    """Write the policy of a checkpoint atomically as a small float32 model file: W1, W2 (and
    the filters) and where they come from (the run's name, its update, episodes, env steps
    and options; no path). It plays but cannot resume training: it has no optimizer state."""
    out = Path(out)
    if out.suffix.lower() != ".npz":  # "-" would be a file named "-", not standard output
        raise CheckpointError(f"{out}: a model file is .npz; name one that ends with .npz")
    if out.exists() and Path(checkpoint_path).exists() and out.samefile(checkpoint_path):
        raise CheckpointError(f"{out} is the checkpoint itself: name another model file")
    state, stored = load(checkpoint_path)
    if out.exists():
        # Only an older model file may be replaced: a model has no optimizer state, so
        # writing one over a run's checkpoint would end that run's --resume.
        try:
            existing = read_arrays(out)
        except CheckpointError:
            existing = {}
        if "rmsprop_W1" in existing:
            raise CheckpointError(f"{out} is a training checkpoint: refusing to overwrite it")
        if "W1" not in existing:
            raise CheckpointError(f"{out} exists and is not a model file: refusing to overwrite it")
    shape = stored_shape(stored)
    w1t, w2 = policy.split(state.params, shape)
    # Names, not paths: the checkpoint's directory, `fork_from`'s last part.
    source = Path(checkpoint_path).resolve()
    run = source.name if source.is_dir() else source.parent.name
    options = {key: value for key, value in stored.items() if key not in _MACHINE_FIELDS}
    if options.get("fork_from"):
        options["fork_from"] = Path(str(options["fork_from"])).name
    arrays = {
        "W1": np.ascontiguousarray(w1t.T, dtype=np.float32),
        "W2": w2.astype(np.float32),
        "config": np.str_(json.dumps(options)),
        "run": np.str_(run),
        "batch": np.int64(state.batch),
        "episodes": np.int64(state.episodes),
        "steps": np.int64(state.steps),
        "format_version": np.int64(1),  # weights alone: the first format's
    }
    if shape.channels:
        arrays["conv"] = policy.conv_kernel(state.params, shape).astype(np.float32)
    write_atomic(out, lambda fh: np.savez(fh, **arrays))
    return out


def load_policy(path: Path) -> tuple[np.ndarray, dict]:
    """(flat float64 params, config) from a checkpoint, a run directory's checkpoint or a
    model file, validated."""
    path = Path(path)
    data = read_arrays(path)
    try:
        if "rmsprop_W1" in data:  # a full checkpoint
            state, stored = _validate(data)
            return state.params, stored
        try:
            w1, w2 = data["W1"], data["W2"]
            stored = config.parse_json(str(data["config"]))
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"not a pong-mp model or checkpoint ({exc})") from None
        shape = _shape_of(data)
        _check_format(data)
        _check_finite(data, ("W1", "W2"))
        _check_config(stored, shape.hidden)
        (tail,) = _tails(data, ("",), shape, np.float32, value_head=False)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return np.concatenate([policy.join(w1, w2), tail]), stored


def stored_shape(stored: dict) -> policy.NetShape:
    """The policy's shape in a checkpoint's or model's stored config."""
    return policy.NetShape(int(stored["hidden"]), config.stored_conv_channels(stored))
