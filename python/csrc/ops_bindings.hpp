// Python bindings to the pgs_ops tables (_C._ops_*), for benchmarks and tests.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace pg_sparse {

// Adds _ops_accumulate, _ops_kth_abs and _ops_compact to @p m.
void bind_ops(pybind11::module_& m);

}  // namespace pg_sparse
