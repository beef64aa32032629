/* The parameter table: every tunable and environment variable of pg_sparse,
 * with its name, type, default and one doc line, defined once here.
 *
 * The core, the torch shim and the Python package read their settings
 * through this table (pg_sparse.params() and `python -m pg_sparse params`
 * print it), so a knob cannot exist without a name, a default and a line of
 * documentation. A value comes from the environment when set, else from the
 * default; objects read their parameters once, when they are created. */
#ifndef PG_SPARSE_PARAM_H
#define PG_SPARSE_PARAM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(id, name, type, default, choices or NULL, min, max, doc) */
#define PGS_PARAM_MAP(X)                                                       \
  X(PGS_PARAM_TRANSPORT, "PG_SPARSE_TRANSPORT", PGS_PARAM_STRING, "auto",      \
    "auto|mpi|gloo", 0, 0,                                                     \
    "host transport: auto takes Open MPI under mpirun or srun --mpi=pmix, "    \
    "gloo otherwise (torchrun, plain srun)")                                   \
  X(PGS_PARAM_CUDA_TRANSPORT, "PG_SPARSE_CUDA_TRANSPORT", PGS_PARAM_STRING,    \
    "auto", "auto|nccl|mpi|mpi-staged|staged", 0, 0,                           \
    "transport of CUDA tensors: auto (NCCL, or staged where ranks share a "    \
    "GPU), NCCL, CUDA-aware Open MPI, Open MPI through pinned host buffers, "  \
    "or staged through pinned host buffers over the host transport")           \
  X(PGS_PARAM_LOG, "PG_SPARSE_LOG", PGS_PARAM_STRING, "warn",                  \
    "error|warn|info|debug", 0, 0,                                             \
    "most verbose level of the pg_sparse logger (C core, shim and Python)")    \
  X(PGS_PARAM_OKTOPK_NUDGE_DOWN, "PG_SPARSE_OKTOPK_NUDGE_DOWN",                \
    PGS_PARAM_FLOAT, "1.01", NULL, 1.0, 2.0,                                   \
    "Ok-Topk: a reused global threshold that picked under 3k/4 is divided "    \
    "by this before the next call")                                            \
  X(PGS_PARAM_OKTOPK_NUDGE_UP, "PG_SPARSE_OKTOPK_NUDGE_UP", PGS_PARAM_FLOAT,   \
    "1.008", NULL, 1.0, 2.0,                                                   \
    "Ok-Topk: a reused global threshold that picked over 5k/4 is multiplied "  \
    "by this before the next call")                                            \
  X(PGS_PARAM_OKTOPK_CAND_SLACK, "PG_SPARSE_OKTOPK_CAND_SLACK",                \
    PGS_PARAM_FLOAT, "0.8", NULL, 0.25, 1.0,                                   \
    "Ok-Topk, TopkA, TopkDSA, gTop-k: first candidate bound, as a fraction "   \
    "of the last local threshold (it then adapts to list 1.3k-2.5k entries)")  \
  X(PGS_PARAM_MPI_BCAST_CHUNK, "PG_SPARSE_MPI_BCAST_CHUNK", PGS_PARAM_INT,     \
    "1073741824", NULL, 1, 2147483647.0,                                       \
    "Open MPI: bytes per piece of a broadcast over INT_MAX bytes")             \
  X(PGS_PARAM_MPI_CANCEL_POLLS, "PG_SPARSE_MPI_CANCEL_POLLS", PGS_PARAM_INT,   \
    "10000", NULL, 1, 1e9,                                                     \
    "Open MPI: tests of a cancelled request before it is given up as "         \
    "unmatched")                                                               \
  X(PGS_PARAM_P2P_NAP_MIN_US, "PG_SPARSE_P2P_NAP_MIN_US", PGS_PARAM_INT, "20", \
    NULL, 0, 1e6,                                                              \
    "point-to-point progress thread: first sleep between polls when "          \
    "nothing moved (microseconds)")                                            \
  X(PGS_PARAM_P2P_NAP_BUSY_US, "PG_SPARSE_P2P_NAP_BUSY_US", PGS_PARAM_INT,     \
    "50", NULL, 0, 1e6,                                                        \
    "point-to-point progress thread: longest sleep within 10 ms of the "       \
    "last completed message (microseconds)")                                   \
  X(PGS_PARAM_P2P_NAP_MAX_US, "PG_SPARSE_P2P_NAP_MAX_US", PGS_PARAM_INT,       \
    "1000", NULL, 0, 1e6,                                                      \
    "point-to-point progress thread: longest sleep when idle "                 \
    "(microseconds)")                                                          \
  X(PGS_PARAM_GLOO_TIMEOUT_SLACK_S, "PG_SPARSE_GLOO_TIMEOUT_SLACK_S",          \
    PGS_PARAM_FLOAT, "10", NULL, 0, 1e6,                                       \
    "gloo transport: gloo's own timeout exceeds the backend's by this many "   \
    "seconds, so a stuck call fails once, with the backend's message")         \
  X(PGS_PARAM_INTRA_NODE, "PG_SPARSE_INTRA_NODE", PGS_PARAM_STRING, "shm",     \
    "shm|group", 0, 0,                                                         \
    "hierarchy='node' on CPU tensors: the dense stages inside a node through " \
    "shared memory (/dev/shm), or through the node's process group")           \
  X(PGS_PARAM_BENCH_LINK, "PG_SPARSE_BENCH_LINK", PGS_PARAM_STRING,            \
    "unshaped (loopback)", NULL, 0, 0,                                         \
    "benchmarks: the link the ranks run over, as reports print it (set by "    \
    "pg_sparse.bench.netlaunch)")                                              \
  X(PGS_PARAM_BENCH_MACHINE_RANKS, "PG_SPARSE_BENCH_MACHINE_RANKS",            \
    PGS_PARAM_INT, "0", NULL, 0, 1e6,                                          \
    "benchmarks: ranks sharing this machine's cores (0: LOCAL_WORLD_SIZE)")    \
  X(PGS_PARAM_FORTUNES, "PG_SPARSE_FORTUNES", PGS_PARAM_STRING,                \
    "/usr/share/games/fortunes", NULL, 0, 0,                                   \
    "examples/convergence: the text corpus (Debian's fortunes-min)")

typedef enum pgs_param_id {
#define PGS_PARAM_ENUM_(id, name, type, def, choices, lo, hi, doc) id,
  PGS_PARAM_MAP(PGS_PARAM_ENUM_)
#undef PGS_PARAM_ENUM_
      PGS_PARAM_COUNT
} pgs_param_id_t;

typedef enum pgs_param_type {
  PGS_PARAM_INT = 0,    /**< int64, decimal */
  PGS_PARAM_FLOAT = 1,  /**< double */
  PGS_PARAM_STRING = 2, /**< free text, or one of choices */
} pgs_param_type_t;

typedef struct pgs_param_info {
  const char *name;          /**< the environment variable */
  pgs_param_type_t type;     /**< how its value is parsed */
  const char *default_value; /**< as text, in the variable's syntax */
  const char *choices;       /**< "a|b|c" for a closed set of strings */
  double min, max;           /**< bounds of a number (inclusive) */
  const char *doc;           /**< one line */
} pgs_param_info_t;

/** @return the table row of @p id, or NULL for an id out of range. */
const pgs_param_info_t *pgs_param_info(pgs_param_id_t id);

/** Find a parameter by its variable name. @return PGS_ERR_INVALID if none. */
int pgs_param_lookup(const char *name, pgs_param_id_t *out);

/** The value in effect: the environment's when set, else the default.
 *  A value that does not parse, is out of [min, max] or not one of the
 *  choices returns PGS_ERR_INVALID and logs an error naming the variable;
 *  asking an INT parameter for a string (or the like) is PGS_ERR_INVALID. */
int pgs_param_int(pgs_param_id_t id, int64_t *out);
int pgs_param_float(pgs_param_id_t id, double *out);
int pgs_param_string(pgs_param_id_t id, const char **out);

/** @return 1 if the variable of @p id is set in the environment. */
int pgs_param_is_set(pgs_param_id_t id);

/** @return the text in effect (the environment's, else the default), or
 *  NULL for an id out of range. */
const char *pgs_param_text(pgs_param_id_t id);

/** @return PGS_OK if the value in effect of @p id parses (whatever its
 *  type), else PGS_ERR_INVALID (logged as the typed getters do). */
int pgs_param_check(pgs_param_id_t id);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_PARAM_H */
