/* cli/cli.h — shared pieces of the `qmla` command-line program:
 * exit codes, option parsing helpers, the progress bar, subcommand entry
 * points. */
#ifndef QMLA_CLI_H
#define QMLA_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qmla/engine.h"
#include "qmla/status.h"
#include "qmla/sweep.h"
#include "qmla/table.h"

enum {
    QMLA_EXIT_OK = 0,
    QMLA_EXIT_FINDING = 1,   /* e.g. a capture that does not reproduce */
    QMLA_EXIT_USAGE = 2,     /* bad usage, malformed input, I/O error */
    QMLA_EXIT_INTERRUPTED = 130
};

/* The --engine paragraph of every analysis command's --help. */
#define CLI_ENGINE_HELP                                                        \
    "--engine NAME: the engine of the per-sequence work: cpu (default), cuda\n" \
    "(a build with -Dgpu_engine=true on a usable GPU; docs/cuda-engine.md\n"   \
    "says which operations run there) or auto (cuda where usable, else cpu;\n"  \
    "a bad QMLA_CUDA_DEVICE is an error, not cpu);\n"                          \
    "any other, or cuda without a usable GPU, is refused (exit 2).\n"          \
    "--device N (or --engine cuda:N, or QMLA_CUDA_DEVICE=N): the CUDA device;\n" \
    "without them the node-local MPI/Slurm rank (OMPI_COMM_WORLD_LOCAL_RANK,\n" \
    "SLURM_LOCALID, ...) mod the device count, else 0; out of range: exit 2.\n"

int cmd_check(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_storage(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_serve_sim(int argc, char **argv);
#include "qmla_config.h"
#if QMLA_HAVE_MPI
/* cli/mpi_sweep.c: 1 when started by mpirun/srun; the distributed
 * sweep (returns -1 when there is one rank: run the serial sweep). */
int cli_mpi_launched(void);
int cli_mpi_sweep(qmla_capture *cap, const qmla_sweep_selection *sel,
                  qmla_sweep_opts *o, const char *out, int verbose);
/* `mpirun -n K qmla jvp|predict|intervene` (cli/mpi_sweep.c): rank r of K
 * calls run_part(ctx, PART, r, K, rank, replay, &stopped, err) with PART =
 * OUT.<group>.part-r-of-K (a shard's part file) and replay the files
 * OUT.<group>.part-* that earlier runs left (listed by every rank before
 * any writes: a rerun with any K resumes them); the ranks agree on
 * success (a failed or interrupted rank named by rank 0; every rank exits
 * non-zero, finished items stay in the parts' journals). Returns -1 for a
 * single rank (run serially); refuse (non-NULL) is refused with K > 1;
 * rank 0 of a successful run gets the K part paths in *parts (free with
 * cli_mpi_parts_free, after removing them with remove = 1 once merged) and
 * -2: merge them now; the other ranks their exit code. */
typedef struct cli_mpi_replay {
    const char *const *files; /* OUT.<group>.part-* of earlier runs (any K) */
    size_t n;
} cli_mpi_replay;
int cli_mpi_op_shards(const char *cmd, const char *out, const char *group, const char *refuse,
                      int (*run_part)(void *ctx, const char *part, size_t shard, size_t n,
                                      int rank, const cli_mpi_replay *replay, int *stopped,
                                      qmla_error *err),
                      void *ctx, char ***parts, size_t *n_parts);
/* Free the part paths; remove = 1 (after the merge): also delete every
 * OUT.<group>.part-* file (the parts and journals of any K). */
void cli_mpi_parts_free(char **parts, size_t n, int remove, const char *out,
                        const char *group);
#endif
int cmd_export(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_figures(int argc, char **argv);
int cmd_report(int argc, char **argv);
/* The figures and tables of `qmla figures` (cmd_figures.c), in --list
 * order: k < cli_figure_count(); the name (output stem: NAME.png|svg|pdf,
 * or NAME.md and NAME.csv for a table) and in *what its description. */
size_t cli_figure_count(void);
const char *cli_figure_at(size_t k, const char **what);
/* Every name of the comma-separated list `list` (given as option `opt` of
 * command `cmd`: "--only", "--exclude") is a figure of the registry: 1;
 * else 0, the bad name reported by cli_fail. */
int cli_figure_list_ok(const char *cmd, const char *opt, const char *list);
/* Is name one of the comma-separated list? */
int cli_in_list(const char *list, const char *name);


/* Table `name` of a results file (cmd_export.c): the HDF5 group, or the
 * derived responses_by_layer when the file has no group of that name. */
int cli_table_load(const char *path, const char *name, qmla_table **t, qmla_error *err);
int cmd_jvp(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_intervene(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_fuse(int argc, char **argv);
int cmd_learn(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_capture(int argc, char **argv);
int cmd_allocate(int argc, char **argv);
/* Shared body of `qmla jvp` (pred 0) and `qmla predict` (pred 1). */
int cli_op_main(int argc, char **argv, int pred);

/* Print "qmla <cmd>: <msg>" to stderr; returns QMLA_EXIT_USAGE. */
int cli_fail(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* After getopt_long: exactly one positional argument (named `what`, e.g.
 * "CAPTURE.h5") left at argv[optind], and -o given (out non-NULL) when
 * out_what ("-o RESULTS.h5") is not NULL. 0, or the usage error printed
 * and QMLA_EXIT_USAGE. */
int cli_require_args(const char *cmd, int argc, const char *what, const char *out,
                     const char *out_what);
/* Print a library error and return the exit code for its status. */
int cli_lib_error(const char *cmd, const qmla_error *err);

/* "0-3,7" -> sorted unique ints. Returns 0, or -1 with msg filled. */
int cli_parse_int_list(const char *s, int **out, size_t *n, char *msg,
                       size_t len);
/* "a,b,c" -> array of strings pointing into a copy (free *out and *buf). */
int cli_split_list(const char *s, char ***out, size_t *n, char **buf);
/* Strict numeric parsing; -1 on error. */
int cli_parse_long(const char *s, long lo, long hi, long *v);
int cli_parse_double(const char *s, double *v);

/* Options several subcommands share (--bits, --group, --nmse, --meta,
 * --threads): parse ARG into *out, or print "qmla CMD: --opt: expected ...,
 * found ..." and return QMLA_EXIT_USAGE. */
int cli_opt_bits(const char *cmd, const char *arg, int *bits);
int cli_opt_group(const char *cmd, const char *arg, int *group);
int cli_opt_nmse(const char *cmd, const char *arg, double *nmse);
int cli_opt_meta(const char *cmd, const char *arg, qmla_meta *meta);
int cli_opt_threads(const char *cmd, const char *arg, int *threads);
/* --engine NAME (qmla/engine.h): *engine, or the engine's refusal naming
 * the engines of this build (returns QMLA_EXIT_USAGE). */
int cli_opt_engine(const char *cmd, const char *arg, const qmla_engine **engine);
/* --device N after --engine: qmla_engine_select_device (device < 0: nothing
 * to do). 0, or QMLA_EXIT_USAGE after a message naming the device asked
 * for and the count found. */
int cli_engine_device(const char *cmd, const qmla_engine *engine, long device);
/* --merge's arguments: CAPTURE.h5 then at least one PART, -o, no --shard.
 * 0, or QMLA_EXIT_USAGE after a message. */
int cli_merge_args(const char *cmd, int argc, const char *out, size_t n_shards);
/* --shard I/N (CLI_FN; dst a cli_shard): 0, or QMLA_EXIT_USAGE. */
typedef struct cli_shard {
    size_t shard, n_shards;
} cli_shard;
int cli_opt_shard(const char *cmd, const char *arg, void *dst);

/* A subcommand's options as a table, parsed by cli_getopt: each entry
 * names a long option (with its short letter, if any), what its argument
 * is and where the parsed value goes. Messages are
 * "qmla CMD: --NAME: expected EXPECTED, found \"ARG\"" (CLI_LONG,
 * CLI_DOUBLE, CLI_CHOICE) or those of the cli_opt_* helpers. */
typedef enum cli_opt_kind {
    CLI_HELP,    /* --help/-h: help on stdout, exit 0 */
    CLI_STR,     /* const char **dst = the argument */
    CLI_SET,     /* no argument: int *dst = 1 */
    CLI_CLEAR,   /* no argument: int *dst = 0 */
    CLI_LONG,    /* long *dst, an integer in lo..hi */
    CLI_DOUBLE,  /* double *dst, a finite number in dlo..dhi (open: see below) */
    CLI_CHOICE,  /* const char **dst, one of the space-separated `choices` */
    CLI_REPEAT,  /* repeatable: const char *dst[hi], count in *(size_t *)count;
                    more than hi: "--NAME: at most HI EXPECTED" */
    CLI_BITS,    /* int *dst (cli_opt_bits) */
    CLI_GROUP,   /* int *dst (cli_opt_group) */
    CLI_NMSE,    /* double *dst (cli_opt_nmse) */
    CLI_THREADS, /* int *dst (cli_opt_threads) */
    CLI_ENGINE,  /* const qmla_engine **dst (cli_opt_engine) */
    CLI_FN       /* fn(cmd, arg, dst): 0, or the exit code after a message */
} cli_opt_kind;
enum { CLI_OPEN_LO = 1, CLI_OPEN_HI = 2 }; /* cli_opt.open: (dlo or dhi) excluded */
typedef struct cli_opt {
    const char *name; /* the long option (NULL: short only) */
    char shrt;        /* its short letter (0: none); name and shrt both
                         unset end the table */
    cli_opt_kind kind;
    void *dst;
    long lo, hi;
    double dlo, dhi;
    int open;
    const char *expected; /* CLI_LONG, CLI_DOUBLE, CLI_CHOICE: the message's
                             "expected ..."; CLI_REPEAT: what hi counts */
    const char *choices;  /* CLI_CHOICE */
    size_t *count;        /* CLI_REPEAT */
    int (*fn)(const char *cmd, const char *arg, void *dst); /* CLI_FN */
} cli_opt;
/* Parse argv with getopt_long over the table (optind reset; getopt's own
 * messages for unknown options and missing arguments). Returns -1 when the
 * command goes on (argv[optind] the first positional argument), else the
 * exit code to return now: QMLA_EXIT_OK after help(stdout, help_ctx) for
 * --help, QMLA_EXIT_USAGE after a message, or after help(stderr, help_ctx)
 * for what getopt refused. */
int cli_getopt(const char *cmd, int argc, char **argv, const cli_opt *opts,
               void (*help)(FILE *f, const void *ctx), const void *help_ctx);

/* --layers L and --cells A,B (the cells option's name in messages:
 * cells_opt, NULL for "--cells") as a sweep selection; the arrays are owned
 * here. Returns 0, or QMLA_EXIT_USAGE after a message (nothing to free). */
typedef struct cli_selection {
    qmla_sweep_selection sel;
    int *layers;
    size_t n_layers;
    char **cells;
    size_t n_cells;
    char *cellbuf;
} cli_selection;
int cli_selection_parse(const char *cmd, const char *layers_arg, const char *cells_arg,
                        const char *cells_opt, cli_selection *s);
void cli_selection_free(cli_selection *s);
/* The selection (cli_selection_parse) and the capture at path opened:
 * 0, or the exit code after the message (then nothing to free or close). */
int cli_open_selected(const char *cmd, const char *path, const char *layers_arg,
                      const char *cells_arg, cli_selection *s, qmla_capture **cap,
                      qmla_error *err);

/* The program's command line, shell-quoted where needed, as recorded by
 * main() (results files store it as provenance). */
void cli_record_command_line(int argc, char **argv);
const char *cli_command_line(void);

/* The summary table of `qmla sweep` and `qmla show` (cli_summary.c) on
 * stdout: per-layer rows when per_layer, model means over the
 * non-degenerate layers, degenerate layers named, and the route-identity
 * line when verify or any row is verified. */
void cli_print_summary(const qmla_summary *s, int per_layer, int verify);

/* The summary of a results file recomputed from its /responses rows
 * (qmla_summary_compute, with the default bootstrap): the dispersion of
 * files whose /summary predates it (docs/math.md §3.1). 0 on success; -1
 * when the file has no readable /responses or its layers are not `layers`
 * (n_layers of them, ascending; NULL: any). */
int cli_summary_from_responses(const char *path, const int *layers, size_t n_layers,
                               qmla_summary *s);

/* Progress bar on stderr (only when stderr is a terminal). */
typedef struct cli_progress {
    int tty;
    double t0;
    size_t resumed;
    double last_report; /* seconds since t0 of the last log line (no tty) */
    const char *label;
} cli_progress;
/* Online processors (the default of --threads). */
int cli_default_threads(void);
void cli_progress_init(cli_progress *p, const char *label);
void cli_progress_update(cli_progress *p, size_t done, size_t total);
void cli_progress_end(cli_progress *p);
double cli_now(void);

#endif
