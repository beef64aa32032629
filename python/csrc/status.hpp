// One place where libpgsparse status codes become C++ exceptions (which
// pybind11 and c10d turn into Python exceptions).
#pragma once

#include <c10/util/Exception.h>

#include <string>

extern "C" {
#include <pg_sparse/status.h>
}

namespace pg_sparse {

// The last error text a transport callback saw on this thread (set by the
// gloo-backed transport), added to the message of a transport failure.
std::string& last_transport_error();

// Throws c10::DistBackendError naming @p what and the status when st != 0.
inline void check(int st, const std::string& what,
                  const std::string& detail = "") {
  if (st == PGS_OK) return;
  std::string msg = "pg_sparse: " + what + " failed: " + pgs_status_string(st) +
                    " (" + pgs_status_name(st) + ")";
  if (!detail.empty()) {
    msg += ": " + detail;
  } else if ((st == PGS_ERR_COMM || st == PGS_ERR_TIMEOUT) &&
             !last_transport_error().empty()) {
    msg += ": " + last_transport_error();
  }
  C10_THROW_ERROR(DistBackendError, msg);
}

}  // namespace pg_sparse
