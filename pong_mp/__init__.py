"""pong-mp: policy-gradient Pong from pixels on a process pool or a Ray cluster."""

from pong_mp import envs as _envs  # registers FakePong-v0 with gymnasium

__version__ = "0.1.0"
del _envs
