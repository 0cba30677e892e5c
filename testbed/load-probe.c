/*
 * Helper of testbed/load.sh (Tally's load test): submit many batch jobs fast, and probe how long
 * a job-read-lock RPC waits. Links libslurm (libslurm-dev), talks to the test bed's slurmctld.
 *
 *   cc -O2 -o load-probe testbed/load-probe.c -lslurm
 *
 *   load-probe submit <jobs-file> <work-dir> <deadline-s>
 *       One job per line: "<user> <account> <gpus> <time-limit-min> <comment|-> <name> [<qos>]".
 *       Submitted in file order, one slurm_submit_batch_job RPC each (no process per job),
 *       as <user> (slurmctld lets its SlurmUser, root here, submit for any uid), script
 *       "exec sleep <time limit>", stdout/stderr /dev/null, -N1 -n1 --gres=gpu:<gpus>, comment
 *       as given ("-": none), --qos=<qos> when given (else the user's default QOS). Busy
 *       answers (see retryable) are retried with a backoff until <deadline-s> has passed.
 *       Prints one line per job "<job id>" on stdout and a summary on stderr; exit 1 if any
 *       job could not be submitted.
 *
 *   load-probe probe <job-id> <interval-ms> <duration-s> <out-file> [<mark-file> [<cpu-file>]]
 *       Every <interval-ms> (start to start; a call slower than that is followed at once by
 *       the next), slurm_load_job(<job-id>): slurmctld answers it under the
 *       job READ lock, so the call waits while any thread holds the job write lock (the
 *       priority plugin's recalculation, the schedulers, submissions). Writes one line per
 *       call: "S <start, unix s with ns> <latency us> <rc>". With <mark-file>, its mtime is
 *       checked after each call and every change is written as "M <mtime, unix s with ns>"
 *       (priority/multifactor rewrites StateSaveLocation/priority_last_decay_ran at the end of
 *       each decay run). With <cpu-file> (/proc/<pid>/task/<tid>/schedstat of the priority
 *       plugin's recalculation thread), its first field (CPU time in ns) is read after each call
 *       and every change is written as "C <unix s with ns> <cpu ns>": the bursts are the
 *       recalculations, their size the thread's CPU time per recalculation. "-" for none.
 *       Stops after <duration-s> or on SIGTERM/SIGINT.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void) sig; stop = 1; }

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What sbatch itself retries on: slurmctld busy (EAGAIN), its job table full, no connection. */
static int retryable(int e)
{
    return e == EAGAIN || e == ESLURM_ERROR_ON_DESC_TO_RECORD_COPY || e == SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT ||
           e == SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR || e == SLURMCTLD_COMMUNICATIONS_SEND_ERROR ||
           e == SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR || e == SLURM_COMMUNICATIONS_CONNECTION_ERROR;
}

static int do_submit(const char *file, const char *work_dir, double deadline_s)
{
    FILE *in = fopen(file, "r");
    if (!in) {
        fprintf(stderr, "load-probe: cannot open %s: %s\n", file, strerror(errno));
        return 1;
    }
    char *env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", NULL};
    char line[1024], script[128], tres[64];
    double t0 = mono(), deadline = t0 + deadline_s;
    long ok = 0, failed = 0, retries = 0, lineno = 0;
    double slowest = 0;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        char user[64], account[64], comment[256], name[64], qos[64] = "";
        unsigned gpus, limit;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        int fields = sscanf(line, "%63s %63s %u %u %255s %63s %63s", user, account, &gpus, &limit, comment, name, qos);
        if (fields != 6 && fields != 7) {
            fprintf(stderr, "load-probe: %s:%ld: bad line\n", file, lineno);
            failed++;
            continue;
        }
        struct passwd *pw = getpwnam(user);
        if (!pw) {
            fprintf(stderr, "load-probe: %s:%ld: no such user %s\n", file, lineno, user);
            failed++;
            continue;
        }
        job_desc_msg_t d;
        slurm_init_job_desc_msg(&d);
        d.name = name;
        d.account = account;
        if (strcmp(comment, "-") != 0)
            d.comment = comment;
        if (qos[0])
            d.qos = qos;
        d.time_limit = limit;
        d.min_nodes = 1;
        d.max_nodes = 1;
        d.num_tasks = 1;
        d.min_cpus = 1;
        snprintf(tres, sizeof tres, "gres:gpu:%u", gpus);
        d.tres_per_node = tres;
        /* Fill jobs sleep through their time limit; the others never start. */
        snprintf(script, sizeof script, "#!/bin/sh\nexec sleep %u\n", limit * 60);
        d.script = script;
        d.environment = env;
        d.env_size = 3;
        d.work_dir = (char *) work_dir;
        d.std_out = "/dev/null";
        d.std_err = "/dev/null";
        d.user_id = pw->pw_uid;
        d.group_id = pw->pw_gid;
        submit_response_msg_t *resp = NULL;
        double backoff = 0.05;
        for (;;) {
            double a = mono();
            int rc = slurm_submit_batch_job(&d, &resp);
            double took = mono() - a;
            if (took > slowest)
                slowest = took;
            if (rc == SLURM_SUCCESS) {
                printf("%u\n", resp->job_id);
                slurm_free_submit_response_response_msg(resp);
                ok++;
                break;
            }
            int e = slurm_get_errno();
            if (retryable(e) && mono() + backoff < deadline) {
                retries++;
                usleep((useconds_t) (backoff * 1e6));
                if (backoff < 2)
                    backoff *= 2;
                continue;
            }
            fprintf(stderr, "load-probe: %s:%ld: submit as %s/%s failed: %s\n", file, lineno, user, account,
                    slurm_strerror(e));
            failed++;
            break;
        }
        if (mono() > deadline) {
            fprintf(stderr, "load-probe: deadline of %.0fs passed after %ld jobs\n", deadline_s, ok);
            failed++;
            break;
        }
    }
    fclose(in);
    fflush(stdout);
    double took = mono() - t0;
    fprintf(stderr, "load-probe: submitted %ld jobs in %.1fs (%.0f/s), %ld retries, %ld failed, slowest call %.0f ms\n",
            ok, took, ok / (took > 0 ? took : 1), retries, failed, slowest * 1e3);
    return failed ? 1 : 0;
}

static int mtime_of(const char *path, struct timespec *ts)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    *ts = st.st_mtim;
    return 0;
}

static long long cpu_ns(const char *path)
{
    FILE *f = fopen(path, "r");
    long long v = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%lld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

static int do_probe(uint32_t job_id, long interval_ms, double duration_s, const char *out_path, const char *mark,
                    const char *cpu)
{
    FILE *out = fopen(out_path, "w");
    if (!out) {
        fprintf(stderr, "load-probe: cannot write %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct timespec last_mark = {0, 0}, m;
    if (mark && mtime_of(mark, &m) == 0)
        last_mark = m;
    long long last_cpu = cpu ? cpu_ns(cpu) : -1, c;
    if (cpu) {
        struct timespec w;
        clock_gettime(CLOCK_REALTIME, &w);
        fprintf(out, "C %ld.%09ld %lld\n", (long) w.tv_sec, w.tv_nsec, last_cpu);
    }
    double end = mono() + duration_s, next = mono();
    long n = 0, errors = 0;
    while (!stop && mono() < end) {
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        double a = mono();
        job_info_msg_t *resp = NULL;
        int rc = slurm_load_job(&resp, job_id, SHOW_ALL);
        double lat = mono() - a;
        int e = rc == SLURM_SUCCESS ? 0 : slurm_get_errno();
        if (resp)
            slurm_free_job_info_msg(resp);
        if (e)
            errors++;
        fprintf(out, "S %ld.%09ld %.0f %d\n", (long) wall.tv_sec, wall.tv_nsec, lat * 1e6, e);
        n++;
        if (mark && mtime_of(mark, &m) == 0 && (m.tv_sec != last_mark.tv_sec || m.tv_nsec != last_mark.tv_nsec)) {
            fprintf(out, "M %ld.%09ld\n", (long) m.tv_sec, m.tv_nsec);
            last_mark = m;
        }
        if (cpu && (c = cpu_ns(cpu)) != last_cpu) {
            struct timespec w;
            clock_gettime(CLOCK_REALTIME, &w);
            fprintf(out, "C %ld.%09ld %lld\n", (long) w.tv_sec, w.tv_nsec, c);
            last_cpu = c;
        }
        next += interval_ms / 1e3;
        double now = mono();
        if (next > now) {
            double s = next - now;
            usleep((useconds_t) (s * 1e6));
        } else {
            next = now; /* fell behind (a long wait): start again from now */
        }
    }
    fclose(out);
    fprintf(stderr, "load-probe: %ld probes of job %u, %ld errors\n", n, job_id, errors);
    return 0;
}

int main(int argc, char **argv)
{
    slurm_init(NULL);
    if (argc == 5 && strcmp(argv[1], "submit") == 0)
        return do_submit(argv[2], argv[3], atof(argv[4]));
    if (argc >= 6 && argc <= 8 && strcmp(argv[1], "probe") == 0) {
        const char *mark = argc >= 7 && strcmp(argv[6], "-") != 0 ? argv[6] : NULL;
        const char *cpu = argc >= 8 && strcmp(argv[7], "-") != 0 ? argv[7] : NULL;
        return do_probe((uint32_t) strtoul(argv[2], NULL, 10), atol(argv[3]), atof(argv[4]), argv[5], mark, cpu);
    }
    fprintf(stderr,
            "usage: load-probe submit <jobs-file> <work-dir> <deadline-s>\n"
            "       load-probe probe <job-id> <interval-ms> <duration-s> <out-file> [<mark-file> [<cpu-file>]]\n");
    return 2;
}
