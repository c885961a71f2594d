"""Builds pong_mp's compiled loops from pong_mp/sparse.pyx; everything else is in pyproject.toml.

Two builds of the one source: `pong_mp._sparse`, for any CPU, and on x86-64
`pong_mp._sparse_avx2`, for CPUs with AVX2 (256-bit vectors, and loops written for them: a
pass over an episode costs about half as much). `pong_mp/sparse.py` loads the one this CPU
runs. Both give the same bits.
"""

import glob
import os
import platform
import sys
from multiprocessing import get_context

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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

BUILDS = [("pong_mp._sparse", FLAGS, None)]  # (module, compiler flags, where its C goes)
if platform.machine().lower() in ("x86_64", "amd64") and os.name == "posix":
    # The same source again, generated apart so the two C files do not collide.
    BUILDS.append(("pong_mp._sparse_avx2", [*FLAGS, "-mavx2"], "build/avx2"))


def generate(build: tuple[str, list[str], str | None]) -> list[Extension]:
    """Cython's C for one build (skipped where it is newer than the source)."""
    name, flags, build_dir = build
    return cythonize([Extension(name, SOURCE, extra_compile_args=flags)], language_level=3,
                     build_dir=build_dir, quiet=True)


class BuildExt(build_ext):
    """Generates Cython's C as the extensions are built, not each time setup.py is read: pip
    reads it three times an install (its requirements, its metadata, the build)."""

    def build_extensions(self) -> None:
        if sys.platform == "linux" and len(BUILDS) > 1:
            # Cython takes seconds a build, on one core: the builds are generated side by
            # side, then generate() below finds their C up to date. Forked, not pickled:
            # setup.py is not a module a child could import. A child that fails leaves its
            # build to generate() below, which reports the error.
            children = [get_context("fork").Process(target=generate, args=(b,)) for b in BUILDS]
            for child in children:
                child.start()
            for child in children:
                child.join()
        for extension, build in zip(self.extensions, BUILDS, strict=True):
            extension.sources = generate(build)[0].sources
        # The builds compile side by side, one a CPU (unless --parallel says otherwise).
        self.parallel = self.parallel or os.cpu_count() or 1
        super().build_extensions()


# Optional: a compiler without AVX2 leaves the build for any CPU alone.
setup(
    ext_modules=[
        Extension(name, SOURCE, extra_compile_args=flags, optional=name != BUILDS[0][0])
        for name, flags, _ in BUILDS
    ],
    cmdclass={"build_ext": BuildExt},
)
