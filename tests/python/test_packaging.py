"""The package as users install and import it: `pip install .` at the
repository root (a wheel from `pip wheel`) installs into a fresh
environment and imports and runs from any folder, the repository root
included; the torch extension needs no Open MPI unless the MPI transport is
used (libpgsparse_mpi is opened on demand)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pg_sparse

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(pg_sparse.__file__).resolve().parent

# One rank of the sparse backend over gloo: an allreduce and a sparse bucket.
ONE_RANK = """
    import os, torch, torch.distributed as dist, pg_sparse
    dist.init_process_group("sparse", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(8)
    dist.all_reduce(t)
    state = pg_sparse.SparseState(algo="oktopk", density=0.5, warmup_steps=0)
    b = state.native_bucket(0, torch.zeros(16))
    g = torch.arange(16, dtype=torch.float32)
    b.allreduce(g).wait()
    maps = open("/proc/self/maps").read()
    print("file", pg_sparse.__file__)
    print("sum", t.sum().item(), "k", b.stats()["k"])
    print("libmpi loaded", "libmpi" in maps)
    dist.destroy_process_group()
"""


def run(argv: list[str], cwd: Path | str = "/tmp", env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PG_SPARSE_", "OMPI_"))}
    return subprocess.run(argv, cwd=cwd, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)


def test_import_from_the_repository_root_finds_the_package():
    # The C core's folder pg_sparse/ is in the root too, as a namespace
    # portion; the real package must win.
    out = run([sys.executable, "-c", "import pg_sparse; print(pg_sparse.__file__, "
               "pg_sparse.algorithms())"], cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0].endswith("pg_sparse/__init__.py"), out.stdout


def test_extension_does_not_need_open_mpi():
    libs = [next(PACKAGE.glob("_C*.so")), PACKAGE / "libpgsparse.so"]
    for lib in libs:
        ldd = run(["ldd", str(lib)])
        assert ldd.returncode == 0, ldd.stderr
        assert "libmpi" not in ldd.stdout, (lib, ldd.stdout)
    # _C finds the core beside it ($ORIGIN); torch's libraries are loaded
    # by `import torch` first, as for every torch extension.
    ldd = run(["ldd", str(libs[0])]).stdout
    assert f"libpgsparse.so => {PACKAGE}/libpgsparse.so" in ldd, ldd
    # Over gloo, Open MPI is never loaded into the process.
    out = run([sys.executable, "-c", textwrap.dedent(ONE_RANK)])
    assert out.returncode == 0, out.stderr
    assert "sum 8.0 k 8" in out.stdout and "libmpi loaded False" in out.stdout, out.stdout


# C++ exceptions from the shim reach Python: a second copy of the C++ runtime
# linked into the package's libraries crashed formatting their messages.
THROWS = """
    import torch, torch.distributed as dist, pg_sparse
    dist.init_process_group("sparse", store=dist.HashStore(), rank=0, world_size=1)
    b = pg_sparse.SparseState(algo="oktopk", density=0.5).native_bucket(0, torch.zeros(16))
    for name, fn in (("value", lambda: b.set_density(0.0)),
                     ("check", lambda: dist.broadcast(torch.ones(3), src=5))):
        try:
            fn()
        except Exception as e:
            print(name, type(e).__name__, str(e).splitlines()[0])
    dist.destroy_process_group()
"""


def test_cxx_exceptions_reach_python_and_no_cxx_runtime_is_exported():
    out = run([sys.executable, "-c", textwrap.dedent(THROWS)])
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    assert "value ValueError pg_sparse: density must be in (0, 1], got 0" in out.stdout, \
        out.stdout
    assert "check RuntimeError pg_sparse::broadcast: root rank 5 out of range" in out.stdout, \
        out.stdout
    if shutil.which("nm") is None:
        pytest.skip("nm not found")
    for lib in sorted(PACKAGE.glob("*.so")):
        syms = run(["nm", "-D", "--defined-only", "-C", str(lib)]).stdout
        runtime = [line for line in syms.splitlines()
                   if "std::basic_ostream" in line or "std::locale::" in line]
        assert not runtime, (lib.name, runtime[:5])


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("g++") is None,
                    reason="needs cmake and g++")
def test_cmake_refuses_a_compiler_that_links_libstdcxx_statically(tmp_path):
    """A g++ that finds no libstdc++.so (the H200 image's /opt/gcc) would put
    a second C++ runtime beside torch's: configuring the extension stops."""
    fake = tmp_path / "g++"
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -print-file-name=libstdc++.so ] "
                    "&& { echo libstdc++.so; exit 0; }; done\nexec g++ \"$@\"\n")
    fake.chmod(0o755)
    cfg = ["cmake", "-S", str(ROOT), "-DPGS_BUILD_TESTS=OFF", "-DPGS_WITH_CUDA=OFF"]
    refused = run([*cfg, "-B", str(tmp_path / "ext"), "-DPGS_BUILD_PYTHON=ON"],
                  env={"CXX": str(fake)})
    assert refused.returncode != 0
    assert "finds no libstdc++.so" in " ".join(refused.stderr.split()), refused.stderr[-2000:]
    # The C core and tests alone only warn.
    core = run([*cfg, "-B", str(tmp_path / "core")], env={"CXX": str(fake)})
    assert core.returncode == 0, core.stderr[-2000:]
    assert "finds no libstdc++.so" in " ".join(core.stderr.split()), core.stderr[-2000:]


def test_missing_mpi_transport_is_a_clear_error(tmp_path):
    # A copy of the package without libpgsparse_mpi stands for a machine
    # without Open MPI: gloo works, the MPI transport says what to do.
    copy = tmp_path / "pg_sparse"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("libpgsparse_mpi.so",
                                                                 "__pycache__"))
    env = {"PYTHONPATH": str(tmp_path)}
    ok = run([sys.executable, "-c", textwrap.dedent(ONE_RANK)], env=env)
    assert ok.returncode == 0, ok.stderr
    assert f"file {copy}/__init__.py" in ok.stdout, ok.stdout
    bad = run([sys.executable, "-c", textwrap.dedent(ONE_RANK)],
              env={**env, "PG_SPARSE_TRANSPORT": "mpi"})
    assert bad.returncode != 0
    assert "the Open MPI transport could not be loaded" in bad.stderr, bad.stderr
    assert "launch with torchrun, which uses gloo" in bad.stderr, bad.stderr


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(wheel, venv python, venv): a wheel of the tree installed into a
    fresh venv that sees torch but installs pg_sparse from the wheel only."""
    tmp = tmp_path_factory.mktemp("wheel")
    # The objects of the editable build are reused (PGS_PY_BUILD_DIR), so
    # this relinks rather than recompiles.
    wheels = tmp / "wheels"
    build = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                 "--no-deps", str(ROOT), "-w", str(wheels)],
                env={"PGS_PY_BUILD_DIR": str(ROOT / "build" / "python")}, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("pg_sparse-*.whl")
    venv = tmp / "venv"
    made = run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    inst = run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    assert inst.returncode == 0, inst.stderr
    return wheel, py, venv


def test_wheel_installs_and_runs_in_a_fresh_environment(installed_wheel, tmp_path):
    wheel, py, venv = installed_wheel
    listing = run([sys.executable, "-m", "zipfile", "-l", str(wheel)]).stdout
    for name in ("pg_sparse/__init__.py", "pg_sparse/libpgsparse.so",
                 "pg_sparse/libpgsparse_mpi.so", "pg_sparse/data/ompi_coll_rules.conf"):
        assert name in listing, listing
    assert "pg_sparse/_C." in listing
    for cwd in (tmp_path, ROOT):
        out = run([str(py), "-c", textwrap.dedent(ONE_RANK)], cwd=cwd)
        assert out.returncode == 0, out.stderr
        assert f"file {venv}/lib/" in out.stdout and "sum 8.0 k 8" in out.stdout, out.stdout
    params = run([str(py), "-m", "pg_sparse", "params"])
    assert params.returncode == 0 and "PG_SPARSE_TRANSPORT" in params.stdout, params.stderr


# Makes every Open MPI (and PMIx) library on the loader's path unloadable in a
# private mount namespace (an empty file bound over each): this machine as a
# machine without Open MPI installed, for the commands after it.
HIDE_OPEN_MPI = """
set -e
empty=$(mktemp)
for f in $(ldconfig -p | grep -E 'libmpi|libopen-(pal|rte)|libpmix' |
           awk '{print $NF}' | xargs -n1 readlink -f | sort -u); do
  mount --bind "$empty" "$f"
done
python3 -c 'import ctypes; ctypes.CDLL("libmpi.so.40")' 2>/dev/null && exit 7
echo "open mpi hidden"
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare for a private mount namespace")
def test_wheel_runs_where_open_mpi_cannot_be_loaded(installed_wheel, tmp_path):
    """The installed wheel on a machine where no Open MPI library can load:
    gloo runs the backend and a sparse bucket, and asking for the MPI
    transport fails with the message that says what to do."""
    _, py, venv = installed_wheel
    script = tmp_path / "one_rank.py"
    script.write_text(textwrap.dedent(ONE_RANK))
    cmd = (HIDE_OPEN_MPI + f"\n{py} {script}\n"
           f"PG_SPARSE_TRANSPORT=mpi {py} {script} && exit 8 || echo 'mpi refused'\n")
    out = run(["unshare", "--mount", "--propagation", "private", "bash", "-c", cmd],
              cwd=tmp_path)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-3000:])
    assert "open mpi hidden" in out.stdout, out.stdout
    assert f"file {venv}/lib/" in out.stdout and "sum 8.0 k 8" in out.stdout, out.stdout
    assert "libmpi loaded False" in out.stdout and "mpi refused" in out.stdout, out.stdout
    assert "the Open MPI transport could not be loaded" in out.stderr, out.stderr[-3000:]
