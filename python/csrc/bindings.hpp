// The module's smaller binding groups (module.cpp calls each bind_*()).
#pragma once

#include <torch/csrc/utils/pybind.h>

extern "C" {
#include <pg_sparse/bucket.h>
}

namespace pg_sparse {

// _log_start(level), _log_stop(), _log(level, subsystem, text): the C
// core's log sink for Python (log.cpp). Messages from any thread are queued
// and one thread hands them to logging.getLogger("pg_sparse.<subsystem>"),
// so a thread that logs never waits for the GIL.
void bind_log(pybind11::module_& m);
// _params(): the parameter table with the values in effect.
void bind_params(pybind11::module_& m);
// _algorithms() and _stats_docs(), from the core's X-macros.
void bind_vocab(pybind11::module_& m);
// A bucket's statistics as a dict of ints and floats (PGS_STATS_MAP).
pybind11::dict stats_dict(const pgs_stats_t& s);

}  // namespace pg_sparse
