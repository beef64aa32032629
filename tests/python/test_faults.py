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
import torch

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


# What a survivor's error may say about a dead peer.
ERROR_WORDS = ("timed out", "closed by peer", "died", "connection")


def assert_raised_clearly(job, survivors, words=ERROR_WORDS):
    """Every survivor was healthy, then raised an error naming the death
    within the process group's timeout plus 30 s."""
    job.check("healthy_before", survivors)
    job.check("raises", survivors)
    for r in survivors:
        detail = job.rank(r)["checks"]["raises"]["detail"]
        error = job.info(r)["error"]
        assert any(w in error.lower() for w in words), error + job.log()
        seconds_after = float(detail.split("(")[1].split(" s after")[0])
        assert seconds_after < TIMEOUT_S + 30, detail


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("launcher", ("torchrun", "mpirun"))
def test_survivors_raise_clearly(jobs, launcher, mode):
    assert_raised_clearly(job_of(jobs, launcher, mode), [0, 1])


NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0


# The same deaths on the GPU path (device machines with 2 GPUs or more): one
# process per GPU, 2 ranks (the second dies), CUDA tensors over NCCL (under
# torchrun and mpirun) and over Open MPI staged through host memory.
# torchrun's agent stops the survivor as soon as it sees the death (every
# monitor interval); NCCL gives no early sign of a dead peer, so the interval
# is set past the timeout here to see the survivor's own error.
CUDA_CONFIGS = {
    "torchrun-nccl": ("torchrun", ("--monitor_interval=30",), {}),
    "mpirun-nccl": ("mpirun", ("--mca", "orte_abort_on_non_zero_status", "0"), {}),
    "mpirun-mpi-staged": ("mpirun", ("--mca", "orte_abort_on_non_zero_status", "0"),
                          {"PG_SPARSE_CUDA_TRANSPORT": "mpi-staged"}),
}


CUDA_CASES = [(c, m) for c in CUDA_CONFIGS for m in MODES]


def cuda_job(jobs, config, mode):
    name, extra, env = CUDA_CONFIGS[config]
    return jobs.get(name, SCRIPT, 2,
                    args=("--mode", mode, "--timeout-s", str(TIMEOUT_S), "--device", "cuda"),
                    timeout=TIMEOUT_S + 60, launcher_args=extra,
                    env={"NCCL_NVLS_ENABLE": "0", **env})


@pytest.mark.skipif(NGPU < 2, reason="needs 2 CUDA GPUs (one rank per GPU)")
@pytest.mark.parametrize(("config", "mode"), CUDA_CASES)
def test_cuda_survivor_raises_and_nothing_is_left(jobs, config, mode):
    job = cuda_job(jobs, config, mode)
    assert not job.timed_out, "the job hung" + job.log()
    assert not job.leftover, f"left running: {job.leftover}" + job.log()
    assert_raised_clearly(job, [0], ERROR_WORDS + ("abort",))


# A dense all_reduce over NCCL returns once its kernels are queued; the
# survivor then waits on the stream (t.cpu()) for a peer that is gone. No
# task of the backend runs, so only the watchdog's watch over the kernels'
# end event sees it: past the timeout it aborts the communicator (the kernels
# return, t.cpu() too), says so on stderr, and the next call raises naming
# the all_reduce.
@pytest.mark.skipif(NGPU < 2, reason="needs 2 CUDA GPUs (one rank per GPU)")
@pytest.mark.parametrize("config", [c for c in CUDA_CONFIGS if "nccl" in c])
def test_cuda_queued_allreduce_times_out_on_the_device(jobs, config):
    job = cuda_job(jobs, config, "allreduce")
    assert not job.timed_out, "the job hung" + job.log()
    assert not job.leftover, f"left running: {job.leftover}" + job.log()
    assert_raised_clearly(job, [0], ("timed out",))
    error = job.info(0)["error"]
    assert "waiting for allreduce on rank 0" in error, error + job.log()
    assert "pg_sparse: Timed out" in job.stderr, job.log()
