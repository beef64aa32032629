"""Item 7: launch detection. Under mpirun the package maps OMPI_* to
RANK/WORLD_SIZE/LOCAL_RANK itself (the worker sets nothing) and uses the MPI
transport; under torchrun the gloo transport; PG_SPARSE_TRANSPORT=gloo
forces gloo under mpirun. Plus unit tests of the mapping on plain dicts and
of the backend registration (no processes)."""

import os

import pytest
import torch.distributed as dist
from test_collectives import job_of

import pg_sparse
from pg_sparse import _launch

# --- from the collectives jobs (already run, or run here once) -----------

@pytest.mark.parametrize("config", ["mpirun-P2", "mpirun-P3", "mpirun-P4"])
def test_mpirun_maps_ompi_environment(jobs, config):
    job = job_of(jobs, config)
    ports = set()
    for r in range(job.nproc):
        info = job.info(r)
        ompi = info["ompi"]
        before, after = info["env_before_import"], info["env_after_import"]
        assert all(v is None for v in before.values()), \
            f"rank {r}: launch variables set before import pg_sparse: {before}" + job.log()
        assert ompi["OMPI_COMM_WORLD_RANK"] == str(r)
        assert after["RANK"] == ompi["OMPI_COMM_WORLD_RANK"], (r, after, ompi)
        assert after["WORLD_SIZE"] == ompi["OMPI_COMM_WORLD_SIZE"] == str(job.nproc), after
        assert after["LOCAL_RANK"] == ompi["OMPI_COMM_WORLD_LOCAL_RANK"], after
        assert after["LOCAL_WORLD_SIZE"] == ompi["OMPI_COMM_WORLD_LOCAL_SIZE"], after
        assert after["MASTER_ADDR"] == "127.0.0.1", after
        ports.add(after["MASTER_PORT"])
        assert (info["dist_rank"], info["dist_world_size"]) == (r, job.nproc), info
        assert info["transport"] == "mpi", info
    assert len(ports) == 1 and 20000 <= int(ports.pop()) < 40000


@pytest.mark.parametrize("config", ["torchrun-P2", "torchrun-P3"])
def test_torchrun_uses_gloo_transport(jobs, config):
    job = job_of(jobs, config)
    for r in range(job.nproc):
        info = job.info(r)
        assert info["transport"] == "gloo", info
        assert info["env_before_import"]["RANK"] == str(r), info  # torchrun's own
        assert info["backend"] == "sparse", info


def test_env_forces_gloo_under_mpirun(jobs):
    job = job_of(jobs, "mpirun-P2-gloo")
    for r in range(job.nproc):
        info = job.info(r)
        assert info["transport"] == "gloo", info
        assert info["env_after_import"]["RANK"] == str(r), info
    job.check("all_reduce_SUM_float32")
    assert "transport gloo (set by PG_SPARSE_TRANSPORT)" in job.stderr + job.stdout, job.log()


def test_transport_logged_once_at_rank0(jobs):
    job = job_of(jobs, "mpirun-P3")
    text = job.stderr + job.stdout
    # PG_SPARSE_LOG=info with no logging configured: the package's stderr
    # handler, rank-tagged; only rank 0 logs the transport.
    assert text.count("[pg_sparse rank 0] INFO transport mpi (launched by mpirun)") == 1, \
        job.log()
    # Each PG_SPARSE_* variable set is logged once per process.
    assert text.count("INFO PG_SPARSE_LOG=info (default warn)") == 3, job.log()


# --- unit tests, no processes --------------------------------------------

def ompi(rank="1", size="4", local_rank="1", local_size="4", **extra):
    env = {"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": size,
           "OMPI_COMM_WORLD_LOCAL_RANK": local_rank, "OMPI_COMM_WORLD_LOCAL_SIZE": local_size,
           "OMPI_MCA_orte_hnp_uri": "1234.0;tcp://10.0.0.1:5555"}
    env.update(extra)
    return env


def test_map_ompi_single_node():
    env = ompi()
    assert _launch.map_mpi_environment(env) is True
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == \
        ("1", "4", "1", "4")
    assert env["MASTER_ADDR"] == "127.0.0.1"
    port = int(env["MASTER_PORT"])
    assert 20000 <= port < 40000
    # Every rank of the job derives the same port; another job another one.
    other_rank = ompi(rank="3", local_rank="3")
    _launch.map_mpi_environment(other_rank)
    assert other_rank["MASTER_PORT"] == env["MASTER_PORT"]
    other_job = ompi(OMPI_MCA_orte_hnp_uri="999.0;tcp://10.0.0.1:7777")
    _launch.map_mpi_environment(other_job)
    assert other_job["MASTER_PORT"] != env["MASTER_PORT"]


def test_port_for_job_spreads_concurrent_jobs():
    """Concurrent mpirun jobs (ids that differ in a few digits, permutations
    included) get different rendezvous ports."""
    ids = [f"prterun-host-{pid}@1" for pid in range(12000, 12100)]
    ports = [_launch._port_for_job({"PMIX_NAMESPACE": i}) for i in ids]
    assert all(20000 <= p < 40000 for p in ports)
    assert len(set(ports)) >= 98, sorted(ports)
    swapped = [_launch._port_for_job({"PMIX_NAMESPACE": f"prterun-host-{pid}@1"})
               for pid in ("12345", "12354", "21345")]
    assert len(set(swapped)) == 3, swapped


def test_map_ompi_multi_node_needs_master():
    env = ompi(rank="5", size="8", local_rank="1", local_size="4")
    assert _launch.map_mpi_environment(env) is True
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == \
        ("5", "8", "1", "4")
    assert "MASTER_ADDR" not in env and "MASTER_PORT" not in env


def test_map_keeps_user_values():
    env = ompi(RANK="7", MASTER_ADDR="node0", MASTER_PORT="29500")
    _launch.map_mpi_environment(env)
    assert env["RANK"] == "7" and env["WORLD_SIZE"] == "4"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("node0", "29500")


def test_map_nothing_without_launcher():
    env = {"PATH": "/bin"}
    assert _launch.map_mpi_environment(env) is False
    assert env == {"PATH": "/bin"}
    assert _launch.mpi_launcher(env) is None


def test_map_torchrun_wins():
    """A torchrun job (even inside mpirun or Slurm) is left to torchrun."""
    env = ompi(TORCHELASTIC_RUN_ID="abc", SLURM_PROCID="0", SLURM_NTASKS="2")
    before = dict(env)
    assert _launch.map_mpi_environment(env) is False
    assert env == before


def slurm(**extra):
    """What srun -n 6 over 3 nodes sets for global rank 3 (Slurm 22.05:
    SLURM_TASKS_PER_NODE always, SLURM_NTASKS_PER_NODE only with
    --ntasks-per-node)."""
    return {"SLURM_PROCID": "3", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "2(x3)",
            "SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURM_STEP_NUM_NODES": "3",
            "SLURM_STEP_NODELIST": "node[07-09]", "SLURM_JOB_NODELIST": "node[07-09]",
            "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", **extra}


def test_map_slurm():
    env = slurm()
    assert _launch.mpi_launcher(env) == "srun"
    assert _launch.map_mpi_environment(env) is True
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == \
        ("3", "6", "1", "2")
    # Several nodes: the step's first node is the rendezvous, on a port every
    # rank of the step derives alike.
    assert env["MASTER_ADDR"] == "node07"
    other = slurm(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")
    _launch.map_mpi_environment(other)
    assert other["MASTER_PORT"] == env["MASTER_PORT"]


def test_map_slurm_uneven_nodes_and_one_node():
    env = slurm(SLURM_NTASKS="5", SLURM_NODEID="2", SLURM_STEP_TASKS_PER_NODE="2(x2),1")
    _launch.map_mpi_environment(env)
    assert env["LOCAL_WORLD_SIZE"] == "1"
    # srun -n 2 on one node: a local rendezvous, as the user tried.
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
           "SLURM_TASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "box", "SLURM_JOB_ID": "7"}
    _launch.map_mpi_environment(env)
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"]) == \
        ("2", "2", "127.0.0.1")


def test_map_srun_pmix_reads_the_size_from_slurm():
    """srun --mpi=pmix: PMIx gives the rank, Slurm the size."""
    env = slurm(PMIX_RANK="3", PMIX_NAMESPACE="slurm.pmix.42.0")
    assert _launch.mpi_launcher(env) == "pmix"
    _launch.map_mpi_environment(env)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == \
        ("3", "6", "1", "2")


def test_slurm_lists():
    assert _launch.tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert _launch.tasks_per_node("4") == [4]
    assert _launch.first_host("gpu[03-05,9],cpu1") == "gpu03"
    assert _launch.first_host("cpu1,gpu[1-2]") == "cpu1"
    assert _launch.first_host("box") == "box"


def test_map_pmi_and_pmix():
    env = {"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"}
    assert _launch.mpi_launcher(env) == "pmi"
    assert _launch.map_mpi_environment(env)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("2", "3", "2")
    assert env["MASTER_ADDR"] == "127.0.0.1"
    env = {"PMIX_RANK": "1", "PMIX_NAMESPACE": "job7"}
    assert _launch.mpi_launcher(env) == "pmix"
    assert _launch.map_mpi_environment(env)
    assert env["RANK"] == "1" and "WORLD_SIZE" not in env


def test_launcher_preference():
    env = {**ompi(), "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    assert _launch.mpi_launcher(env) == "mpirun"


def test_choose_transport(monkeypatch):
    for k in [k for k in os.environ if k.startswith(("OMPI_COMM_WORLD", "PMI",
                                                                     "SLURM_", "TORCHELASTIC"))]:
        monkeypatch.delenv(k)
    monkeypatch.delenv("PG_SPARSE_TRANSPORT", raising=False)
    assert pg_sparse.choose_transport()[0] == "gloo"
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert pg_sparse.choose_transport() == ("mpi", "launched by mpirun")
    monkeypatch.setenv("PG_SPARSE_TRANSPORT", "gloo")
    assert pg_sparse.choose_transport() == ("gloo", "set by PG_SPARSE_TRANSPORT")
    # A plain srun gives Open MPI no PMI: gloo, with the reason.
    monkeypatch.delenv("PG_SPARSE_TRANSPORT")
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK")
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    transport, why = pg_sparse.choose_transport()
    assert transport == "gloo" and "srun" in why and "pmix" in why
    # Backend options win over the environment.
    assert pg_sparse.choose_transport(pg_sparse.Options(transport="mpi"))[0] == "mpi"
    monkeypatch.setenv("PG_SPARSE_TRANSPORT", "nccl2")
    with pytest.raises(ValueError,
                       match="PG_SPARSE_TRANSPORT=.nccl2. is invalid: choose one of auto"):
        pg_sparse.choose_transport()
    with pytest.raises(ValueError, match="unknown transport 'tcp'"):
        pg_sparse.choose_transport(pg_sparse.Options(transport="tcp"))


def test_backend_registered():
    assert "sparse" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["sparse"] == ["cpu", "cuda"]
    assert dist.Backend._plugins["SPARSE"].extended_api is True
    assert pg_sparse.__file__.endswith("pg_sparse/__init__.py")


def test_open_mpi_rules_set_under_mpirun():
    env = ompi()
    assert _launch.tune_open_mpi(env) is True
    assert env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"
    rules = env["OMPI_MCA_coll_tuned_dynamic_rules_filename"]
    # The file Open MPI reads: allreduce (id 2), every comm size from 2, the
    # fixed decision below 1 MiB and the ring (algorithm 4) from 1 MiB on.
    numbers = [int(w) for w in open(rules).read().split()]
    assert numbers == [1, 2, 1, 2, 2, 0, 0, 0, 0, 1 << 20, 4, 0, 0]


def test_open_mpi_rules_leave_user_choice_and_torchrun_alone():
    for user in ({"OMPI_MCA_coll_tuned_allreduce_algorithm": "3"},
                 {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"}):
        env = ompi(**user)
        before = dict(env)
        assert _launch.tune_open_mpi(env) is False
        assert env == before
    env = {"TORCHELASTIC_RUN_ID": "x", "PATH": "/bin"}
    assert _launch.tune_open_mpi(env) is False and "OMPI_MCA_coll_tuned_use_dynamic_rules" \
        not in env
