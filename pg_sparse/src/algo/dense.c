/* dense: allreduce of grad + residual, divided by P. Also every algorithm's
 * warm-up path (pgs_dense_step in bucket.c). */
#include "algo/algo_internal.h"

const pgs_algo_vtable_t pgs_algo_dense = {
    .init = NULL,
    .step = pgs_dense_step,
    .fini = NULL,
};
