// Typed reads of the C core's parameter table for the shim: a malformed
// value throws, naming the variable (the core also logs it).
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

extern "C" {
#include <pg_sparse/param.h>
#include <pg_sparse/status.h>
}

namespace pg_sparse {

inline std::string bad_param(pgs_param_id_t id) {
  const pgs_param_info_t* p = pgs_param_info(id);
  std::string msg = std::string("pg_sparse: ") + p->name + " is invalid";
  if (p->choices != nullptr) msg += std::string(" (choose ") + p->choices + ")";
  return msg;
}

// "PG_SPARSE_X='v'" for each parameter whose value in effect is invalid
// (empty if none): what a PGS_ERR_INVALID from the core may be about.
inline std::string invalid_params() {
  std::string out;
  for (int i = 0; i < PGS_PARAM_COUNT; ++i) {
    auto id = static_cast<pgs_param_id_t>(i);
    if (pgs_param_check(id) == PGS_OK) continue;
    out += std::string(out.empty() ? "" : ", ") + pgs_param_info(id)->name +
           "='" + pgs_param_text(id) + "'";
  }
  return out;
}

inline int64_t param_int(pgs_param_id_t id) {
  int64_t v = 0;
  TORCH_CHECK_VALUE(pgs_param_int(id, &v) == PGS_OK, bad_param(id));
  return v;
}

inline double param_float(pgs_param_id_t id) {
  double v = 0;
  TORCH_CHECK_VALUE(pgs_param_float(id, &v) == PGS_OK, bad_param(id));
  return v;
}

inline std::string param_string(pgs_param_id_t id) {
  const char* v = nullptr;
  TORCH_CHECK_VALUE(pgs_param_string(id, &v) == PGS_OK, bad_param(id));
  return v;
}

}  // namespace pg_sparse
