// The core's vocabulary for Python, generated from its X-macros: the
// algorithm names (PGS_ALGO_MAP) and the typed statistics (PGS_STATS_MAP),
// so adding an algorithm or a statistic is an edit of the C header only.
#include <torch/csrc/utils/pybind.h>

#include "bindings.hpp"

extern "C" {
#include <pg_sparse/bucket.h>
}

namespace py = pybind11;

namespace pg_sparse {

py::dict stats_dict(const pgs_stats_t& s) {
  py::dict d;
  // int and int64_t fields become Python ints, double fields floats.
#define PGS_STATS_ITEM_(type, name, doc) d[#name] = s.name;
  PGS_STATS_MAP(PGS_STATS_ITEM_)
#undef PGS_STATS_ITEM_
  int64_t sent = 0, recv = 0;
  double time = 0;
  for (int p = 0; p < PGS_PHASE_COUNT; ++p) {
    sent += s.words_sent[p];
    recv += s.words_recv[p];
    time += s.time_s[p];
  }
  d["density"] = s.n ? static_cast<double>(s.global_selected) / s.n : 0.0;
  d["words_sent"] = sent;
  d["words_recv"] = recv;
  d["bytes_sent"] = 4 * sent + s.ctrl_bytes_sent;
  d["bytes_recv"] = 4 * recv + s.ctrl_bytes_recv;
  d["time_s"] = time;
  d["time_select_s"] = s.time_s[PGS_PHASE_SELECT];
  d["time_reduce_s"] = s.time_s[PGS_PHASE_REDUCE];
  d["time_gather_s"] = s.time_s[PGS_PHASE_GATHER];
  return d;
}

namespace {

py::dict stats_docs() {
  py::dict d;
#define PGS_STATS_DOC_(type, name, doc) d[#name] = doc;
  PGS_STATS_MAP(PGS_STATS_DOC_)
#undef PGS_STATS_DOC_
  d["density"] = "global_selected / n";
  d["words_sent"] = "data words sent, all phases";
  d["words_recv"] = "data words received, all phases";
  d["bytes_sent"] = "4 * words_sent + ctrl_bytes_sent";
  d["bytes_recv"] = "4 * words_recv + ctrl_bytes_recv";
  d["time_s"] = "seconds of the call, all phases";
  d["time_select_s"] = "seconds: accumulate, local threshold, compaction";
  d["time_reduce_s"] = "seconds: repartition, split and reduce";
  d["time_gather_s"] = "seconds: global selection, balance, allgather";
  return d;
}

}  // namespace

void bind_vocab(py::module_& m) {
  m.def(
      "_algorithms",
      [] {
        py::list names;
#define PGS_ALGO_NAME_(id, name, vtable) names.append(name);
        PGS_ALGO_MAP(PGS_ALGO_NAME_)
#undef PGS_ALGO_NAME_
        return names;
      },
      "The algorithm names, in the core's order (PGS_ALGO_MAP).");
  m.def(
      "_estimators",
      [] {
        py::dict out;
#define PGS_EST_ENTRY_(id, name, doc) out[name] = doc;
        PGS_ESTIMATOR_MAP(PGS_EST_ENTRY_)
#undef PGS_EST_ENTRY_
        return out;
      },
      "The threshold estimators, name -> doc, in the core's order "
      "(PGS_ESTIMATOR_MAP).");
  m.def("_stats_docs", &stats_docs,
        "One doc line per key of SparseBucket.stats().");
}

}  // namespace pg_sparse
