/* Status codes: text and names generated from PGS_STATUS_MAP, so adding a
 * code to the map is the only edit a new status needs. */
#include <pg_sparse/status.h>

const char *pgs_status_string(int status) {
  switch (status) {
#define PGS_STATUS_STRING_(name, value, text) \
  case value: return text;
    PGS_STATUS_MAP(PGS_STATUS_STRING_)
#undef PGS_STATUS_STRING_
    default: return "unknown status";
  }
}

const char *pgs_status_name(int status) {
  switch (status) {
#define PGS_STATUS_NAME_(name, value, text) \
  case value: return #name;
    PGS_STATUS_MAP(PGS_STATUS_NAME_)
#undef PGS_STATUS_NAME_
    default: return "PGS_UNKNOWN";
  }
}
