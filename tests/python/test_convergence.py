"""Issue 11: short convergence runs of real tasks (examples/convergence) at 4
ranks, two with momentum SGD and the GPT with AdamW (given to the hook with
optimizer=, issue 52): Ok-Topk at density 0.01
ends within a bounded gap of dense DDP trained from the same seed in the
same job."""

import pytest

SCRIPT = "convergence.py"
# task -> (steps, methods after dense, bound: accuracy points or perplexity
# ratio - 1). The bounds hold the gaps measured on this seed at these short
# lengths with margin (digits at 260 steps: 0.3-1.1 pt over three seeds; the
# LSTM at 120 steps, still far from its plateau: +17% with momentum correction,
# the recipe for momentum SGD; the GPT at 120 steps with the user's AdamW
# given to the hook, register_comm_hook(..., optimizer=opt), and Ok-Topk's
# default global_factor 2: +4.2%, where AdamW left alone under Ok-Topk is
# +101%): a broken hook or a lost residual lands far outside them.
# The hierarchical mode (2 "nodes" x 2 ranks), algo="auto" and ADTopk are held to
# Ok-Topk's bound on digits, in a job of their own.
CASES = {
    "digits": ("digits", 260, ("oktopk@0.01",), 1.5),
    "lstm": ("lstm", 120, ("oktopk+mc@0.01",), 0.25),
    "gpt": ("gpt", 120, ("oktopk+opt@0.01",), 0.12),
    "digits-more": ("digits", 260, ("oktopk+node@0.01", "auto@0.01", "adtopk@0.01"), 1.5),
}
NPROC, TIMEOUT = 4, 110


def job_of(jobs, case):
    task, steps, methods, bound = CASES[case]
    args = ("--task", task, "--steps", str(steps), "--methods",
            ",".join(("dense", *methods)), "--bound", str(bound))
    return jobs.get("torchrun", SCRIPT, NPROC, args=args, timeout=TIMEOUT)


@pytest.mark.parametrize("case,method", [
    pytest.param(c, m, id=f"{c}-{m}") for c, (_, _, ms, _) in CASES.items()
    for m in ("dense", *ms)])
def test_gap_to_dense(jobs, case, method):
    job_of(jobs, case).check(f"{CASES[case][0]}_{method}")


@pytest.mark.parametrize("case", CASES)
def test_job_ends_cleanly(jobs, case):
    job_of(jobs, case).assert_clean_exit()


def test_cosine_schedule_warms_up_then_ends_at_a_tenth():
    """``--lr-decay cosine``: the linear warm-up, then down to lr/10 at the
    last step, never rising; the recipe's constant rate stays at lr."""
    import math
    import sys
    from dataclasses import replace
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "convergence"))
    from tasks import Recipe, lr_factor

    const = Recipe("adamw", lr=3e-3, batch=12, steps=2400, eval_every=24, lr_warmup=20)
    cos = replace(const, lr_decay="cosine")
    assert lr_factor(cos, 0) == pytest.approx(1 / 20)
    assert lr_factor(cos, 18) == pytest.approx(19 / 20)
    assert lr_factor(cos, 19) == pytest.approx(1.0)
    assert lr_factor(cos, 2399) == pytest.approx(0.1)
    assert lr_factor(cos, 1209) == pytest.approx(0.55, abs=1e-3)  # halfway
    f = [lr_factor(cos, s) for s in range(19, 2400)]
    assert all(a >= b for a, b in zip(f, f[1:]))
    assert all(math.isclose(lr_factor(const, s), 1.0) for s in range(19, 2400, 97))
