/* cmd_jvp.c — `qmla jvp`: local (JVP) versus finite gains of the QDQ
 * directions (docs/math.md §5) -> group /jvp of a results file. The body is
 * shared with `qmla predict` (cmd_predict.c, cli_op_main). */
#include "cli.h"

int cmd_jvp(int argc, char **argv)
{
    return cli_op_main(argc, argv, 0);
}
