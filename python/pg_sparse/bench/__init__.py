"""Benchmarks of pg_sparse against dense baselines measured in the same run.

Run ``python -m pg_sparse.bench --help``. Each suite writes JSON, a markdown
table and PNG plots into ``--out`` and prints the machine, card, torch
version, world size, transport and link next to its figures.

Suites: ``kernels`` (selection and k-th |x| against ``torch.topk`` and a
streaming-pass floor), ``collectives`` (one call of every algorithm and
dense), ``ddp`` (DDP step time of real architectures with every hook and
torch's baselines), ``net`` (network namespaces shaped with tc), ``sweep``
(the ddp suite across link rates, crossovers with dense) and ``model`` (an
alpha-beta model fitted to the sweep, projected to many ranks and fast
links). docs/bench/README.md is the report made from them.
"""
