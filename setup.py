"""Builds pong_mp.sparse, the compiled per-step loops; everything else is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-adds, whatever -march a build uses, so that every
# machine adds the same rounded products (determinism across workers and Ray nodes).
loops = Extension(
    "pong_mp.sparse",
    ["pong_mp/sparse.pyx"],
    extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
)
setup(ext_modules=cythonize([loops], language_level=3))
