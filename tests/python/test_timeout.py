"""Item 8: the init_process_group timeout (3 s here) is honoured. Rank 0
calls all_reduce, rank 1 never does: rank 0 gets an exception saying it
timed out within a few seconds of the timeout, its future fails too, later
collectives fail at once, and the job ends (with os._exit, and also by
returning normally through interpreter exit: backend shutdown and
MPI_Finalize must not hang on the stuck rank).

Under mpirun the MPI transport relies on the backend's watchdog; under
torchrun the inner gloo backend's own timeout may answer first.

Under mpirun also a point-to-point receive that nobody sends to: it fails
after the timeout and leaves the group usable (under torchrun a gloo
timeout closes the connection, as it does in torch's gloo backend)."""

import pytest

SCRIPT = "timeout.py"
TIMEOUT_S = 3.0
JOB_TIMEOUT = 60
# name -> (launcher, --mode, --exit)
CONFIGS = {f"{launcher}-{exit_}_exit": (launcher, "collective", exit_)
           for launcher in ("torchrun", "mpirun") for exit_ in ("os", "normal")}
CONFIGS["mpirun-p2p-normal_exit"] = ("mpirun", "p2p", "normal")

CHECKS = {
    "collective": [("healthy_before", [0, 1]), ("times_out", [0]), ("future_errors", [0]),
                   ("later_collective_errors", [0]), ("peer_stayed_out", [1])],
    "p2p": [("healthy_before", [0, 1]), ("recv_times_out", [0]), ("healthy_after", [0, 1]),
            ("p2p_after", [0, 1])],
}


def job_of(jobs, config):
    launcher, mode, exit_ = CONFIGS[config]
    return jobs.get(launcher, SCRIPT, 2, args=("--timeout-s", str(TIMEOUT_S), "--exit", exit_,
                                               "--mode", mode), timeout=JOB_TIMEOUT)


@pytest.mark.parametrize("config,check,ranks", [
    pytest.param(config, check, ranks, id=f"{config}-{check}")
    for config, (_, mode, _) in CONFIGS.items() for check, ranks in CHECKS[mode]])
def test_timeout(jobs, config, check, ranks):
    job = job_of(jobs, config)
    job.check(check, ranks)
    if check in ("times_out", "recv_times_out"):
        detail = job.rank(0)["checks"][check]["detail"]
        assert "timed out" in detail.lower(), detail + job.log()


@pytest.mark.parametrize("config", CONFIGS)
def test_job_ends(jobs, config):
    """The job ended by itself. mpirun may report a non-zero exit when a rank
    leaves with os._exit or a thread is left in MPI; the ranks' results are
    what count there. torchrun jobs must exit 0."""
    job = job_of(jobs, config)
    assert not job.timed_out, "the job hung and was killed" + job.log()
    for r in (0, 1):
        assert job.rank(r)["done"], f"rank {r} did not finish" + job.log()
    if config.startswith("torchrun"):
        assert job.returncode == 0, job.log()
