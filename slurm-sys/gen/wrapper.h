/*
 * Input of slurm-sys's bindgen run (see slurm-sys/gen/src/main.rs).
 *
 * Compiled with -I<slurm source> -I<stub dir>. The stub dir holds an empty
 * config.h (no ./configure is run) and a copy of libslurm-dev's
 * slurm/slurm_version.h (the source tree only has slurm_version.h.in).
 */
#include "slurm/slurm_version.h"
#include "src/slurmctld/slurmctld.h"    /* job_record_t, job_details, job_list, last_job_update */
#include "src/slurmctld/locks.h"        /* slurmctld_lock_t, lock_slurmctld */
#include "src/slurmctld/job_scheduler.h"/* job_queue_rec_t */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
#include "src/interfaces/preempt.h"     /* slurm_preempt_data_type_t (moved in 23.02) */
#else
#include "src/slurmctld/preempt.h"      /* slurm_preempt_data_type_t */
#endif
#include "src/common/list.h"            /* List / list_t, list_* */
#include "src/common/xmalloc.h"         /* slurm_xcalloc, slurm_xfree, xfree_ptr */
#include "src/common/xstring.h"         /* xstrdup */
#include "src/common/bitstring.h"       /* bit_test, bit_size (node_bitmap) */
#include "src/common/read_config.h"     /* slurm_conf */
#include "src/common/slurm_protocol_defs.h" /* priority_factors_request_msg_t (before 23.02) */
#include "slurm/slurm_errno.h"          /* SLURM_SUCCESS, ESLURM_* */
/*
 * slurm_info/slurm_error/slurm_verbose/slurm_debug: the logging functions
 * Slurm documents as exported to plugins. src/common/log.h declares only
 * slurm_info and slurm_verbose (error() and debug() are macros/other names
 * there); slurm/spank.h declares all of them.
 */
#include "slurm/spank.h"
/*
 * Node state flags are SLURM_BIT() macros, which bindgen does not expand;
 * clang evaluates these constants (NODE_STATE_DOWN/FUTURE/BASE are plain
 * enum values and #defines, allowlisted directly).
 */
static const uint32_t NODE_STATE_FLAG_DRAIN = NODE_STATE_DRAIN;
static const uint32_t NODE_STATE_FLAG_RES = NODE_STATE_RES;
static const uint32_t NODE_STATE_FLAG_POWERED_DOWN = NODE_STATE_POWERED_DOWN;
static const uint32_t NODE_STATE_FLAG_POWERING_DOWN = NODE_STATE_POWERING_DOWN;
static const uint32_t NODE_STATE_FLAG_NO_RESPOND = NODE_STATE_NO_RESPOND;
static const uint32_t NODE_STATE_FLAG_FAIL = NODE_STATE_FAIL;
static const uint32_t NODE_STATE_FLAG_MAINT = NODE_STATE_MAINT;
static const uint32_t NODE_STATE_FLAG_REBOOT_ISSUED = NODE_STATE_REBOOT_ISSUED;
