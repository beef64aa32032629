"""A rank dies mid-run and ``torchrun --max-restarts`` restarts the job,
which resumes from its last checkpoint (model, optimizer and the hook's
SparseState): the final parameters equal an uninterrupted run's, bit for
bit (see workers/restart.py)."""

SCRIPT = "restart.py"


def run(jobs, ckpt, kill: bool):
    args = ("--ckpt", str(ckpt)) + (() if kill else ("--no-kill",))
    # One restart: the planned death. (A restarted rank once read the dead
    # attempt's gloo address from torchrun's shared store and failed to
    # connect; the backend now prefixes its keys with a token of the round,
    # see _round.py and test_restart_nodes.py.)
    return jobs.get("torchrun", SCRIPT, 2, args=args, timeout=150,
                    launcher_args=("--max_restarts=1",))


def test_restarted_job_matches_uninterrupted_run(jobs, tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "restarted").mkdir()
    plain = run(jobs, tmp_path / "plain", kill=False)
    restarted = run(jobs, tmp_path / "restarted", kill=True)
    for job in (plain, restarted):
        job.check("finished")
        job.assert_clean_exit()
        assert not job.leftover, job.leftover
    for r in (0, 1):
        assert restarted.info(r)["attempt"] == 1, restarted.info(r)
        assert restarted.info(r)["resumed_at"] > 0, restarted.info(r)
        assert plain.info(r)["attempt"] == 0
    digests = {job.info(r)["params"] for job in (plain, restarted) for r in (0, 1)}
    assert len(digests) == 1, digests
