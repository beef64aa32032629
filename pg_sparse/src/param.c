/* The parameter table, generated from PGS_PARAM_MAP, and the parsers that
 * read a value from the environment. Nothing is cached: an object reads its
 * parameters when it is created, so a test can change a variable between
 * objects. */
#include <errno.h>
#include <math.h>
#include <pg_sparse/log.h>
#include <pg_sparse/param.h>
#include <pg_sparse/status.h>
#include <stdlib.h>
#include <string.h>

static const pgs_param_info_t pgs_params_[PGS_PARAM_COUNT] = {
#define PGS_PARAM_ROW_(id, name, type, def, choices, lo, hi, doc) \
  [id] = {name, type, def, choices, lo, hi, doc},
    PGS_PARAM_MAP(PGS_PARAM_ROW_)
#undef PGS_PARAM_ROW_
};

const pgs_param_info_t *pgs_param_info(pgs_param_id_t id) {
  if ((int)id < 0 || id >= PGS_PARAM_COUNT) return NULL;
  return &pgs_params_[id];
}

int pgs_param_lookup(const char *name, pgs_param_id_t *out) {
  if (name == NULL || out == NULL) return PGS_ERR_INVALID;
  for (int i = 0; i < PGS_PARAM_COUNT; ++i) {
    if (strcmp(pgs_params_[i].name, name) == 0) {
      *out = (pgs_param_id_t)i;
      return PGS_OK;
    }
  }
  return PGS_ERR_INVALID;
}

int pgs_param_is_set(pgs_param_id_t id) {
  const pgs_param_info_t *p = pgs_param_info(id);
  return p != NULL && getenv(p->name) != NULL;
}

/* The text in effect: the environment's, else the default. */
static const char *param_text(const pgs_param_info_t *p) {
  const char *env = getenv(p->name);
  return env != NULL ? env : p->default_value;
}

const char *pgs_param_text(pgs_param_id_t id) {
  const pgs_param_info_t *p = pgs_param_info(id);
  return p != NULL ? param_text(p) : NULL;
}

static int bad_value(const pgs_param_info_t *p, const char *text,
                     const char *why) {
  pgs_log(PGS_LOG_ERROR, "param", "%s=\"%s\" is %s", p->name, text, why);
  return PGS_ERR_INVALID;
}

/* Reads a number of either type; @p integral rejects fractions. */
static int parse_number(const pgs_param_info_t *p, int integral, double *out) {
  const char *text = param_text(p);
  char *end = NULL;
  errno = 0;
  double v = integral ? (double)strtoll(text, &end, 10) : strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !isfinite(v))
    return bad_value(p, text, integral ? "not an integer" : "not a number");
  if (v < p->min || v > p->max) return bad_value(p, text, "out of range");
  *out = v;
  return PGS_OK;
}

int pgs_param_int(pgs_param_id_t id, int64_t *out) {
  const pgs_param_info_t *p = pgs_param_info(id);
  if (p == NULL || out == NULL || p->type != PGS_PARAM_INT)
    return PGS_ERR_INVALID;
  double v = 0;
  int st = parse_number(p, 1, &v);
  if (st == PGS_OK) *out = (int64_t)v;
  return st;
}

int pgs_param_float(pgs_param_id_t id, double *out) {
  const pgs_param_info_t *p = pgs_param_info(id);
  if (p == NULL || out == NULL || p->type != PGS_PARAM_FLOAT)
    return PGS_ERR_INVALID;
  return parse_number(p, 0, out);
}

/* Is @p text one of the '|'-separated @p choices? */
static int is_choice(const char *choices, const char *text) {
  const size_t len = strlen(text);
  for (const char *c = choices; *c != '\0';) {
    const char *bar = strchr(c, '|');
    const size_t n = bar != NULL ? (size_t)(bar - c) : strlen(c);
    if (n == len && strncmp(c, text, n) == 0) return 1;
    if (bar == NULL) break;
    c = bar + 1;
  }
  return 0;
}

int pgs_param_string(pgs_param_id_t id, const char **out) {
  const pgs_param_info_t *p = pgs_param_info(id);
  if (p == NULL || out == NULL || p->type != PGS_PARAM_STRING)
    return PGS_ERR_INVALID;
  const char *text = param_text(p);
  if (p->choices != NULL && !is_choice(p->choices, text))
    return bad_value(p, text, "not one of the choices");
  *out = text;
  return PGS_OK;
}

int pgs_param_check(pgs_param_id_t id) {
  const pgs_param_info_t *p = pgs_param_info(id);
  if (p == NULL) return PGS_ERR_INVALID;
  int64_t i;
  double f;
  const char *s;
  switch (p->type) {
    case PGS_PARAM_INT: return pgs_param_int(id, &i);
    case PGS_PARAM_FLOAT: return pgs_param_float(id, &f);
    case PGS_PARAM_STRING: return pgs_param_string(id, &s);
  }
  return PGS_ERR_INVALID;
}
