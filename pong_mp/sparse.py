"""The compiled loops (`sparse.pyx`), built for this CPU: with AVX2 where it has it, else for
any CPU. Both builds give the same bits; `PONG_MP_LOOPS=portable` forces the second."""

from __future__ import annotations

import os


def _has_avx2() -> bool:
    # Linux lists a feature only where the kernel also saves its registers.
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx2" in flags


BUILD = "portable"  # which build this process runs: "avx2" or "portable"

if os.environ.get("PONG_MP_LOOPS") != "portable" and _has_avx2():
    try:
        from pong_mp._sparse_avx2 import *  # noqa: F403

        BUILD = "avx2"
    except ImportError:  # built where the compiler had no AVX2
        pass
if BUILD == "portable":
    from pong_mp._sparse import *  # noqa: F403
