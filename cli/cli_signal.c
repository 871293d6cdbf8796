/* cli_signal.c — SIGINT and SIGTERM for the long-running commands.
 *
 * The handler only records the signal; the sweep polls it between items
 * (through its progress callback), finishes or abandons the current item,
 * keeps its journal and exits 130.
 *
 * Installed with sigaction and without SA_RESTART, on purpose: the sweep
 * only looks at the flag between items, so a system call that is blocked
 * when the signal arrives (a read or write on a slow or stalled file system,
 * a full pipe on stderr) must return (EINTR) rather than be restarted and
 * block on, swallowing the request to stop. The failure that EINTR causes
 * is then reported as the interruption (cli_interrupted() is set), not as an
 * I/O error. SA_RESETHAND: a second SIGINT/SIGTERM of the same kind takes
 * the default action at once (the journal is written line by line with
 * fsync and survives that; a stale temporary file is removed by the next
 * run). */
#include "cli.h"
#include "cli_safe.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t got_signal = 0;

static void on_signal(int sig)
{
    got_signal = sig;
}

void cli_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND; /* and not SA_RESTART: see above */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_interrupted(void)
{
    return got_signal;
}

const char *cli_signal_name(void)
{
    return got_signal == SIGTERM ? "SIGTERM" : got_signal == SIGINT ? "SIGINT" : "a signal";
}

int cli_progress_poll(void *ctx, size_t done, size_t total, size_t resumed)
{
    (void)resumed;
    cli_progress_update(ctx, done, total);
    return cli_interrupted() != 0;
}

int cli_quiet_poll(void *ctx, size_t done, size_t total, size_t resumed)
{
    (void)ctx;
    (void)done;
    (void)total;
    (void)resumed;
    return cli_interrupted() != 0;
}
