"""Builds pong_mp.sparse, the compiled per-step loops; everything else is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-adds, whatever -march a build uses, so that every
# machine adds the same rounded products (determinism across workers and Ray nodes).
# -fno-math-errno: sqrt is the instruction, with no branch to set errno (never read), so that
# the optimizers' loops vectorize; the results are the same correctly rounded ones.
loops = Extension(
    "pong_mp.sparse",
    ["pong_mp/sparse.pyx"],
    extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno"],
)
setup(ext_modules=cythonize([loops], language_level=3))
