"""Builds pg_sparse's torch extension (the C core and the C++ shim) with
CMake; the metadata is in pyproject.toml. Against the torch already in this
Python, never a downloaded one:

    pip install --no-build-isolation .          # or -e . for development
    pip wheel --no-build-isolation --no-deps .  # a wheel for other machines
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# Shared libraries the build puts beside _C (found there through $ORIGIN):
# the C core, the Open MPI transport (opened only when used) and, when
# CUDA is built, the CUDA ops table.
COMPANIONS = ("libpgsparse.so", "libpgsparse_mpi.so", "libpgsparse_cuda.so")


class CMakeBuild(build_ext):
    """Runs the top-level CMakeLists.txt with the Python extension on."""

    def _companions(self) -> list[Path]:
        # Where build_extension put them (get_ext_fullpath names the source
        # tree instead while an in-place build copies).
        out_dir = getattr(self, "_out_dir", None)
        if out_dir is None:
            return []
        return [out_dir / name for name in COMPANIONS if (out_dir / name).exists()]

    def get_outputs(self) -> list[str]:
        return [*super().get_outputs(), *map(str, self._companions())]

    def copy_extensions_to_source(self) -> None:
        """In-place and editable builds: the libraries go beside _C too."""
        super().copy_extensions_to_source()
        package_dir = ROOT / "python" / "pg_sparse"
        for lib in self._companions():
            self.copy_file(str(lib), str(package_dir / lib.name), level=self.verbose)

    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        self._out_dir = out_dir
        build_dir = Path(os.environ.get("PGS_PY_BUILD_DIR",
                                        ROOT / "build" / "python")).resolve()
        config = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DPGS_BUILD_PYTHON=ON", "-DPGS_BUILD_TESTS=OFF",
            "-DBUILD_SHARED_LIBS=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DPGS_PYTHON_OUTPUT_DIR={out_dir}",
        ]
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(config)
        # _C depends on libpgsparse and libpgsparse_mpi, which land beside it.
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs,
                               "--target", "_C"])


setup(
    ext_modules=[Extension("pg_sparse._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
