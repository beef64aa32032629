"""Worker of test_auto.py (torchrun, 2 ranks, the "sparse" backend over
gloo): SparseState(algo="auto") through DDP. Every call is checked against
the conservation invariant (sums over a gloo group as the oracle); a fast
link must give plain DDP's result (gloo DDP as the oracle); a slow link must
choose sparse; a model proven wrong by measurement must switch to dense,
and the switch must flush the residual; the measured link and the choices
must be the same on every rank."""

from __future__ import annotations

import copy
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pg_sparse


def gsum(t: torch.Tensor, group) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, group=group)
    return out


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Tanh(),
                               torch.nn.Linear(30, 7))


def run(state: pg_sparse.SparseState, oracle, steps: int, prepare=None):
    """Train ``steps`` steps with the auto hook; check every call's
    conservation; return (model, per-call (dense flag, auto_dense, residual
    norm after))."""
    world = dist.get_world_size()
    ddp = DDP(model())
    calls = []

    def probe(st, bucket):
        x = bucket.buffer().detach().clone()
        old = st._buckets.get(bucket.index())
        restored = old is None and bucket.index() in st._saved
        if old is not None:
            before = old.residual().clone()
        elif restored:
            # What a checkpoint restores, in the packing it was saved in
            # (DDP's first iteration packs the bucket otherwise): checked
            # below on the sums over the bucket, which no packing changes.
            before = st._saved[bucket.index()]["residual"].clone()
        else:
            before = torch.zeros_like(x)
        if prepare is not None and old is None:
            prepare(st)

        def after(f):
            out = f.value()
            nb = st._buckets[bucket.index()]
            resid = nb.residual().clone()
            if restored:
                lhs = gsum(resid.sum(), oracle) + world * out.sum()
                rhs = gsum(x.sum() + before.sum(), oracle)
            else:
                lhs = gsum(resid, oracle) + world * out
                rhs = gsum(x + before, oracle)
            assert torch.allclose(lhs, rhs, rtol=1e-4, atol=1e-5), (lhs - rhs).abs().max()
            s = st.stats()[bucket.index()]
            calls.append((int(s["dense"]), int(s["auto_dense"]), float(resid.abs().sum())))
            return out
        return pg_sparse.hooks.sparse_hook(st, bucket).then(after)

    ddp.register_comm_hook(state, probe)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(50 + dist.get_rank())
    for _ in range(steps):
        ddp(torch.randn(16, 40, generator=gen)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return ddp.module, calls


def train(state: pg_sparse.SparseState, steps: int, native: bool,
          device: torch.device) -> torch.nn.Module:
    """Train ``steps`` steps on ``device`` with ``sparse_hook`` registered
    through the C++ hook (``native``) or as a plain Python hook."""
    ddp = DDP(model().to(device))
    if native:
        pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.sparse_hook)
    else:
        ddp.register_comm_hook(state, pg_sparse.hooks.sparse_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(50 + dist.get_rank())
    for _ in range(steps):
        ddp(torch.randn(16, 40, generator=gen).to(device)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return ddp.module


def check_native(rank: int, device: torch.device) -> None:
    """Through the C++ hook the calls between decisions run natively, the
    decisions still come every auto_interval calls (in Python), and training
    gives the Python hook's bits: on a slow link (sparse throughout) and with
    the model proven wrong (sparse, then dense from the fourth call, as the
    Python path above checks call by call). Python runs the first call, the
    second (DDP rebuilds its buckets after its first iteration) and each
    decision (calls 4 and 7); the C++ hook the others."""
    for link, steps, native_calls, last_dense in (((1e-9, 1e3), 8, 4, 0),
                                                   ((1e-12, 1e10), 6, 3, 1)):
        models, states = [], []
        for native in (False, True):
            st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=link,
                                       auto_interval=3, auto_trial_calls=0)
            st._auto.select_s = 0.0
            models.append(train(st, steps, native, device))
            states.append(st)
        st = states[1]
        assert st._native_table.calls == native_calls, st._native_table.calls
        assert st._auto.calls_of(0) == steps, st._auto.calls_of(0)
        s = st.stats()[0]
        assert s["dense"] == last_dense and s["auto_dense"] == last_dense, s
        assert s["auto_measured_s"] == s["auto_measured_s"], s  # decided: not NaN
        if last_dense:
            assert st._buckets[0].residual().abs().sum() == 0
        for p, q in zip(models[0].parameters(), models[1].parameters()):
            assert torch.equal(p, q), (p - q).abs().max()
    print(f"rank {rank}: C++ hook served the calls between decisions, same bits "
          f"({device.type})", flush=True)


def check_classes(rank: int, oracle) -> None:
    """4 ranks as 2 nodes x 2: auto measures the links inside a node and
    across nodes, the same on every rank, and predicts the sparse methods
    with them (the conservation invariant checked on every call); with one
    node there are no classes."""
    st = pg_sparse.SparseState(algo="auto", density=0.05, local_size=2)
    run(st, oracle, 3)
    ch = st._auto
    assert ch.classes is not None and ch.classes.local_size == 2, ch.classes
    links = [ch.link, ch.classes.intra, ch.classes.cross]
    assert all(x.alpha_s > 0 and x.beta_bytes_s > 0 for x in links), links
    same_on_every_rank([v for x in links for v in (x.alpha_s, x.beta_bytes_s)])
    s = st.stats()[0]
    assert s["auto_cross_beta_bytes_s"] == ch.classes.cross.beta_bytes_s, s
    n, k = int(s["n"]), max(1, round(0.05 * int(s["n"])))
    for m in ("dense", *pg_sparse._auto.CANDIDATES):
        want = pg_sparse._auto.predict(m, 4, n, k, ch.link, ch.select_s, ch.classes,
                                       st.global_factor)  # Ok-Topk's G size
        assert s[f"auto_model_{m}_s"] == want, (m, s)
    one = pg_sparse.SparseState(algo="auto", density=0.05, local_size=4)
    run(one, oracle, 1)
    assert one._auto.classes is None and "auto_intra_beta_bytes_s" not in one.stats()[0]
    print(f"rank {rank}: link classes measured: intra "
          f"{ch.classes.intra.beta_bytes_s / 1e9:.2f} GB/s, cross "
          f"{ch.classes.cross.beta_bytes_s / 1e9:.2f} GB/s, group "
          f"{ch.link.beta_bytes_s / 1e9:.2f} GB/s", flush=True)


def check_trials(rank: int, oracle, device: torch.device) -> None:
    """Methods the model finds close are tried on the bucket and the fastest
    measured is kept: at P = 2 on a slow link TopkA, GaussianK, TopkDSA and
    Ok-Topk send the same words (Ok-Topk in more rounds), so the first three
    each run a trial of 2 calls (a new native
    bucket for each other algorithm, the residual carried over: the
    conservation invariant is checked on every call); then through the C++
    hook, whose calls begin after the trials, on ``device`` (on a GPU only
    this part: the replicas must stay equal on every rank)."""
    st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e3),
                               auto_trial_calls=2)
    m = train(st, 10, True, device)
    assert not st._auto.buckets[0].trying and len(st._auto.buckets[0].measured) == 3
    assert st._native_table.calls > 0, st._native_table.calls
    same_on_every_rank([float(p.double().sum()) for p in m.parameters()])
    if device.type != "cpu":
        print(f"rank {rank}: trials through the C++ hook ({device.type})", flush=True)
        return
    st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e3),
                               auto_trial_calls=2)
    _, calls = run(st, oracle, 10)
    assert [d for d, _, _ in calls] == [1] + [0] * 9, calls
    c = st._auto.buckets[0]
    ranked = sorted(pg_sparse._auto.CANDIDATES, key=lambda m: c.predicted[m])
    assert ranked[:3] == ["topka", "gaussiank", "topkdsa"], c.predicted
    assert sorted(c.measured) == sorted(ranked[:3]), c.measured
    assert not c.trying and c.algo == min(c.measured, key=c.measured.get), c
    s = st.stats()[0]
    assert s["auto_trying"] == 0 and s[f"auto_trial_{c.algo}_s"] == c.measured[c.algo], s
    same_on_every_rank([*c.measured.values(), float(sorted(c.measured).index(c.algo))])
    kept, first = c.algo, sorted(c.measured)
    # A checkpoint in the middle of the trials: the restored state goes on
    # with them (the residual and the trial in progress carried over).
    st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e3),
                               auto_trial_calls=2)
    run(st, oracle, 4)
    saved = copy.deepcopy(st.state_dict())
    assert saved["buckets"][0]["auto"]["trying"] and saved["buckets"][0]["auto"]["measured"]
    st2 = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e3),
                                auto_trial_calls=2)
    st2.load_state_dict(saved)
    _, calls = run(st2, oracle, 8)
    c2 = st2._auto.buckets[0]
    assert [d for d, _, _ in calls] == [0] * 8 and not c2.trying, (calls, c2)
    assert sorted(c2.measured) == first and c2.algo == min(c2.measured, key=c2.measured.get)
    # Dense among the close methods (density 0.5 at P = 2: TopkA's and
    # GaussianK's words equal dense's; no selection cost): it runs a trial
    # too, and the bucket's sparse algorithm afterwards is the fastest sparse
    # one measured, whichever method is kept.
    st = pg_sparse.SparseState(algo="auto", density=0.5, auto_link=(1e-9, 1e3),
                               auto_trial_calls=2)
    st._auto.select_s = 0.0
    _, calls = run(st, oracle, 10)
    c = st._auto.buckets[0]
    assert sorted(c.measured) == ["dense", "gaussiank", "topka"], c.measured
    fastest = min(c.measured, key=c.measured.get)
    sparse = min(("gaussiank", "topka"), key=c.measured.get)
    assert not c.trying and c.dense == (fastest == "dense") and c.algo == sparse, c
    assert calls[-1][0] == int(fastest == "dense"), calls
    same_on_every_rank([*c.measured.values(), float(c.dense)])
    print(f"rank {rank}: trials measured {first} and, with dense, "
          f"{sorted(c.measured)}; kept {kept}", flush=True)


def same_on_every_rank(values: list[float]) -> None:
    t = torch.tensor(values, dtype=torch.float64)
    lo, hi = t.clone(), t.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    assert torch.equal(lo, hi), (lo, hi)


def main() -> None:
    dist.init_process_group("sparse")
    rank = dist.get_rank()
    oracle = dist.new_group(backend="gloo")
    if sys.argv[1:] == ["cuda"]:  # the ranks share GPU 0 (staged transport)
        check_native(rank, torch.device("cuda", 0))
        check_trials(rank, oracle, torch.device("cuda", 0))
        dist.destroy_process_group()
        return
    if sys.argv[1:] == ["classes"]:  # 4 ranks
        check_classes(rank, oracle)
        dist.destroy_process_group()
        return

    # A fast link: dense everywhere, as plain DDP on gloo.
    st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e13))
    m, calls = run(st, oracle, 6)
    assert all(d == 1 and a == 1 for d, a, _ in calls), calls
    ref = DDP(model(), process_group=oracle)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(50 + rank)
    for _ in range(6):
        ref(torch.randn(16, 40, generator=gen)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    worst = max((p - q).abs().max().item() for p, q in zip(m.parameters(), ref.parameters()))
    assert worst < 1e-5, worst
    print(f"rank {rank}: fast link dense, max diff to gloo DDP {worst:.1e}", flush=True)

    # A slow link: sparse after the warm-up, the algorithm the model prefers.
    st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e3),
                               auto_trial_calls=0)
    _, calls = run(st, oracle, 6)
    assert [d for d, _, _ in calls] == [1, 0, 0, 0, 0, 0], calls
    s = st.stats()[0]
    algo = st._auto.buckets[0].algo
    cands = {a: s[f"auto_model_{a}_s"] for a in pg_sparse._auto.CANDIDATES}
    assert cands[algo] == min(cands.values()) and s["auto_model_dense_s"] > cands[algo], s
    print(f"rank {rank}: slow link sparse ({algo})", flush=True)

    # A density range: on a slow link the bytes dominate and the sparsest
    # point is the only one within 10% of the fastest; on a link where only
    # the selection cost counts every point is, and the densest is chosen
    # (there dense wins the choice itself). Conservation is checked per call.
    for link, want, dense in (((1e-9, 1e3), 0.01, 0), ((1e-12, 1e13), 0.2, 1)):
        st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=link,
                                   auto_density=(0.01, 0.2), auto_trial_calls=0)
        _, calls = run(st, oracle, 4)
        s = st.stats()[0]
        assert abs(s["auto_density"] - want) <= 1e-9 * want and s["auto_dense"] == dense, s
        if not dense:
            assert calls[-1][0] == 0 and abs(s["k"] - round(want * s["n"])) <= 1, s
        same_on_every_rank([s["auto_density"], s["auto_dense"]])
    print(f"rank {rank}: density range chose 0.01 on a slow link, 0.2 on a fast one",
          flush=True)

    # The model says sparse (no selection cost, no latency), the measured
    # sparse calls say otherwise: after auto_interval calls the bucket
    # switches to dense, and that call sends the residual along.
    st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-12, 1e10),
                               auto_interval=3, auto_trial_calls=0)

    def no_select(state):
        state._auto.select_s = 0.0

    st._auto.select_s = 0.0
    _, calls = run(st, oracle, 6, prepare=no_select)
    # (From call 6 on both methods have measured times, and the faster
    # measured one is chosen: either, on this loopback.)
    flags = [d for d, _, _ in calls]
    assert flags == [1, 0, 0, 1, 1, 1], calls
    assert all(r == 0.0 for _, _, r in calls[3:]) and calls[2][2] > 0, calls
    s = st.stats()[0]
    assert s["auto_dense"] == 1.0 and s["auto_error"] > 0, s
    same_on_every_rank([s["auto_measured_s"], s["auto_error"]])
    saved = st.state_dict()["buckets"][0]["auto"]
    assert saved["dense"] is True and saved["calls"] == 6, saved
    assert saved["scale"][st._auto.buckets[0].algo] > 1, saved  # the model was optimistic
    print(f"rank {rank}: switched to dense after 3 sparse calls "
          f"(prediction error {s['auto_error']:+.0f})", flush=True)

    check_native(rank, torch.device("cpu"))
    check_trials(rank, oracle, torch.device("cpu"))

    # Measured link: positive, and the same on every rank.
    st = pg_sparse.SparseState(algo="auto", density=0.05)
    run(st, oracle, 3)
    link = st._auto.link
    assert link is not None and link.alpha_s > 0 and link.beta_bytes_s > 0, link
    same_on_every_rank([link.alpha_s, link.beta_bytes_s, st._auto.select_s])
    # A checkpoint of a sparse choice (a residual to carry) restores the
    # choice and the residual into a fresh state; conservation holds across.
    st = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e3),
                               auto_trial_calls=0)
    run(st, oracle, 3)
    saved = copy.deepcopy(st.state_dict())
    assert saved["buckets"][0]["residual"].abs().sum() > 0
    st2 = pg_sparse.SparseState(algo="auto", density=0.05, auto_link=(1e-9, 1e3),
                                auto_trial_calls=0)
    st2.load_state_dict(saved)
    _, calls = run(st2, oracle, 2)
    assert [d for d, _, _ in calls] == [0, 0], calls  # sparse, no new warm-up
    assert st2._auto.buckets[0].algo == st._auto.buckets[0].algo
    assert st2._auto.calls_of(0) == 5, st2._auto.calls_of(0)
    print(f"rank {rank}: measured alpha {link.alpha_s * 1e6:.1f} us, "
          f"beta {link.beta_bytes_s / 1e9:.2f} GB/s; restored", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
