"""Builds pg_sparse: the C core and the torch extension, through CMake.

Install against the torch already in this Python (never downloads torch):

    pip install --no-build-isolation -e python/
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent.parent


class CMakeBuild(build_ext):
    """Runs the top-level CMakeLists.txt with the Python extension on."""

    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_dir = Path(os.environ.get("PGS_PY_BUILD_DIR",
                                        ROOT / "build" / "python")).resolve()
        config = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DPGS_BUILD_PYTHON=ON", "-DPGS_BUILD_TESTS=OFF",
            "-DBUILD_SHARED_LIBS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DPGS_PYTHON_OUTPUT_DIR={out_dir}",
        ]
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(config)
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs,
                               "--target", "_C"])


setup(
    name="pg_sparse",
    version="0.1.0",
    description="Sparse-gradient torch.distributed backend (Ok-Topk and baselines)",
    packages=["pg_sparse", "pg_sparse.bench"],
    package_dir={"pg_sparse": "pg_sparse"},
    package_data={"pg_sparse": ["data/*.conf"]},
    ext_modules=[Extension("pg_sparse._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["torch>=2.11"],
    extras_require={"examples": ["tqdm", "scikit-learn"], "test": ["pytest"]},
)
