// pg_sparse._C._params(): the C core's parameter table with the values in
// effect, for pg_sparse.params() and `python -m pg_sparse params`.
#include <torch/csrc/utils/pybind.h>

#include "bindings.hpp"

extern "C" {
#include <pg_sparse/param.h>
#include <pg_sparse/status.h>
}

namespace py = pybind11;

namespace pg_sparse {
namespace {

const char* type_name(pgs_param_type_t t) {
  switch (t) {
    case PGS_PARAM_INT: return "int";
    case PGS_PARAM_FLOAT: return "float";
    case PGS_PARAM_STRING: return "str";
  }
  return "?";
}

// The value in effect, typed; None when the environment's text is invalid.
py::object value_of(pgs_param_id_t id, pgs_param_type_t type) {
  int64_t i = 0;
  double f = 0;
  const char* s = nullptr;
  switch (type) {
    case PGS_PARAM_INT:
      if (pgs_param_int(id, &i) == PGS_OK) return py::int_(i);
      break;
    case PGS_PARAM_FLOAT:
      if (pgs_param_float(id, &f) == PGS_OK) return py::float_(f);
      break;
    case PGS_PARAM_STRING:
      if (pgs_param_string(id, &s) == PGS_OK) return py::str(s);
      break;
  }
  return py::none();
}

py::dict row_of(pgs_param_id_t id) {
  const pgs_param_info_t* p = pgs_param_info(id);
  py::dict row;
  row["name"] = p->name;
  row["type"] = type_name(p->type);
  row["default"] = p->default_value;
  row["choices"] = p->choices ? py::cast(std::string(p->choices)) : py::none();
  row["min"] = p->min;
  row["max"] = p->max;
  row["doc"] = p->doc;
  row["set"] = pgs_param_is_set(id) != 0;
  row["text"] = pgs_param_text(id);
  row["value"] = value_of(id, p->type);
  return row;
}

py::list params() {
  py::list rows;
  for (int i = 0; i < PGS_PARAM_COUNT; ++i)
    rows.append(row_of(static_cast<pgs_param_id_t>(i)));
  return rows;
}

py::object param(const std::string& name) {
  pgs_param_id_t id;
  if (pgs_param_lookup(name.c_str(), &id) != PGS_OK) return py::none();
  return row_of(id);
}

}  // namespace

void bind_params(py::module_& m) {
  m.def("_params", &params,
        "The parameter table: one dict per PG_SPARSE_* variable (name, type, "
        "default, choices, min, max, doc, set, text, value).");
  m.def("_param", &param, py::arg("name"),
        "The row of one parameter by its variable name, or None.");
}

}  // namespace pg_sparse
