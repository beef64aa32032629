"""A rank SIGKILLed in the middle of a job (reliability issue): in an
all_reduce, in a DDP backward with the Ok-Topk hook, and while rank 0 waits
in a recv from it. Every survivor raises a clear error within the process
group's timeout plus 30 s, the job ends, and no process of it is left.

torchrun runs with a 5 s monitor interval, so the survivors see the death
themselves before the agent stops them (under sparse-over-gloo a closed
connection answers at once). Open MPI ends the whole job when a rank dies
unless ``orte_abort_on_non_zero_status`` is 0: with it, the survivors raise
(the backend's watchdog, after the timeout); without it, mpirun kills them
and the job still ends with nothing left.
"""

import pytest

SCRIPT = "faults.py"
TIMEOUT_S = 10.0
MODES = ("allreduce", "hook", "p2p")
LAUNCHERS = {
    "torchrun": ("torchrun", ("--monitor_interval=5",)),
    "mpirun": ("mpirun", ("--mca", "orte_abort_on_non_zero_status", "0")),
    "mpirun-default": ("mpirun", ()),
}


def job_of(jobs, launcher, mode):
    name, extra = LAUNCHERS[launcher]
    return jobs.get(name, SCRIPT, 3, args=("--mode", mode, "--timeout-s", str(TIMEOUT_S)),
                    timeout=TIMEOUT_S + 60, launcher_args=extra)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_job_ends_and_nothing_is_left(jobs, launcher, mode):
    job = job_of(jobs, launcher, mode)
    assert not job.timed_out, "the job hung" + job.log()
    assert job.seconds < TIMEOUT_S + 30 + 20, f"{job.seconds:.0f} s" + job.log()
    assert not job.leftover, f"left running: {job.leftover}" + job.log()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("launcher", ("torchrun", "mpirun"))
def test_survivors_raise_clearly(jobs, launcher, mode):
    job = job_of(jobs, launcher, mode)
    survivors = [0, 1]
    job.check("healthy_before", survivors)
    job.check("raises", survivors)
    for r in survivors:
        detail = job.rank(r)["checks"]["raises"]["detail"]
        error = job.info(r)["error"]
        words = ("timed out", "closed by peer", "died", "connection")
        assert any(w in error.lower() for w in words), error + job.log()
        seconds_after = float(detail.split("(")[1].split(" s after")[0])
        assert seconds_after < TIMEOUT_S + 30, detail
