"""Builds pong_mp's compiled loops from pong_mp/sparse.pyx; everything else is in pyproject.toml.

Two builds of the one source: `pong_mp._sparse`, for any CPU, and on x86-64
`pong_mp._sparse_avx2`, for CPUs with AVX2 (256-bit vectors, and loops written for them: a
pass over an episode costs about half as much). `pong_mp/sparse.py` loads the one this CPU
runs. Both give the same bits.
"""

import glob
import os
import platform

from Cython.Build import cythonize
from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-adds, whatever -march a build uses, so that every
# machine adds the same rounded products (determinism across workers and Ray nodes).
# -fno-math-errno: sqrt is the instruction, with no branch to set errno (never read), so that
# the optimizers' loops vectorize; the results are the same correctly rounded ones.
# Wider vectors change nothing else: each element gets the same operations in the same order,
# and no sum is reordered (no fast-math).
# -g0: no debug information (Python's own flags ask for it), which halves the compile time of
# each build; the code generated is the same.
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-g0"]
SOURCE = ["pong_mp/sparse.pyx"]

# A build from before the loader would shadow pong_mp/sparse.py.
for stale in glob.glob("pong_mp/sparse.*.so") + glob.glob("pong_mp/sparse.*.pyd"):
    os.remove(stale)

extensions = cythonize([Extension("pong_mp._sparse", SOURCE, extra_compile_args=FLAGS)],
                       language_level=3)
if platform.machine().lower() in ("x86_64", "amd64") and os.name == "posix":
    # The same source again, generated apart so the two C files do not collide. Optional: a
    # compiler without AVX2 leaves the build for any CPU alone.
    avx2 = cythonize(
        [Extension("pong_mp._sparse_avx2", SOURCE, extra_compile_args=[*FLAGS, "-mavx2"])],
        language_level=3,
        build_dir="build/avx2",
    )
    for extension in avx2:
        extension.optional = True  # set after cythonize, which does not carry it over
    extensions += avx2
# The builds compile side by side, one a CPU.
setup(ext_modules=extensions, options={"build_ext": {"parallel": os.cpu_count() or 1}})
