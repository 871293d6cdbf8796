/* cmd_export.c — `qmla export`: one table of a results file as text (TSV,
 * CSV, Markdown, JSON) with the file's provenance, for gnuplot, spreadsheets
 * and pandas. Generic: the 1-D datasets of one length in any group, root or
 * nested, are a table (qmla_table_list, include/qmla/table.h: a group of
 * several lengths gives GROUP and GROUP:LEN); `responses_by_layer` is
 * derived from /responses.
 *
 *   qmla export results.h5 --table summary --format csv -o summary.csv */
#include "cli.h"
#include "qmla/export.h"
#include "qmla/intervene.h"
#include "qmla/predict.h"
#include "qmla/table.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla export RESULTS.h5 [--table NAME] [--format tsv|csv|md|json]\n"
        "                   [-o FILE] [--list]\n"
        "\n"
        "Write one table of a results file as text, with the file's root\n"
        "attributes (model, capture hash, quantizer, ...) as provenance:\n"
        "`# key: value` comment lines (tsv, csv), an HTML comment (md) or the\n"
        "\"provenance\" object (json). Columns are named in a header row; units\n"
        "and descriptions, where the file has them, come as `# column` lines.\n"
        "Floats are written as the shortest decimal that reads back exactly.\n"
        "\n"
        "  --table NAME    a table as --list names it (default responses): a group's\n"
        "                  1-D datasets of one length (nested: layers/0/content;\n"
        "                  a group of several lengths: GROUP and GROUP:LEN, e.g.\n"
        "                  interventions and interventions:384);\n"
        "                  predict_pairs: /predict's RoPE/content pairs (log\n"
        "                  response ratios, measured and predicted);\n"
        "                  intervention_ratios: /interventions' gain ratios\n"
        "                  with their intervals (both computed, not stored);\n"
        "                  responses_by_layer: per-layer means of /responses by\n"
        "                  path (computed, not stored; docs/figures.md)\n"
        "  --format F      tsv (default), csv, md or json\n"
        "  -o FILE         write to FILE instead of standard output (atomically;\n"
        "                  refused: the results file itself, an HDF5 file, a\n"
        "                  device, FIFO or folder)\n"
        "  --list          list the tables (name, rows, columns) and exit\n"
        "\n"
        "examples:\n"
        "  qmla export results.h5 --list\n"
        "  qmla export experiments/operator/tiny-mla-full-intervene.h5 --table interventions:9216\n"
        "  qmla export results.h5 --table summary\n"
        "  qmla export results.h5 --format csv -o responses.csv\n"
        "  qmla export results.h5 --table summary --format json | python3 -m json.tool\n"
        "  pandas: pd.read_csv(\"responses.csv\", comment=\"#\")\n");
}

/* The derived tables: name, the group they are computed from. */
static const char *const derived[][2] = {{"responses_by_layer", "responses"},
                                         {"predict_pairs", "predict"},
                                         {"intervention_ratios", "interventions"}};

/* predict_pairs and intervention_ratios (qmla/predict.h, qmla/intervene.h) */
static int load_op_derived(const char *path, const char *name, qmla_table **t,
                           qmla_error *err)
{
    qmla_table *r = NULL;
    qmla_error e2;
    qmla_error_clear(&e2);
    const int pairs = !strcmp(name, "predict_pairs");
    int st = qmla_table_read_any(path, pairs ? "predict" : "interventions", &r, &e2);
    if (st) {
        if (err)
            *err = e2;
        return st;
    }
    st = pairs ? qmla_op_pairs_table(r, t, err)
               : qmla_intervene_ratios_table(r->attrs, r->n_attrs, t, err);
    qmla_table_free(r);
    if (st)
        qmla_error_prefix(err, "%s: ", path);
    return st;
}

/* Read table `name` of path; a derived table (responses_by_layer,
 * predict_pairs, intervention_ratios) when the file has no group of that
 * name. */
int cli_table_load(const char *path, const char *name, qmla_table **t, qmla_error *err)
{
    int st = qmla_table_read_any(path, name, t, err);
    if (st == QMLA_EFORMAT && (!strcmp(name, "predict_pairs") ||
                               !strcmp(name, "intervention_ratios")))
        return load_op_derived(path, name, t, err);
    if (st != QMLA_EFORMAT || strcmp(name, "responses_by_layer"))
        return st;
    qmla_table *r = NULL;
    qmla_error e2;
    qmla_error_clear(&e2);
    if ((st = qmla_table_read(path, "responses", &r, &e2))) {
        if (err)
            *err = e2;
        return st;
    }
    st = qmla_table_by_layer(r, t, err);
    qmla_table_free(r);
    if (st)
        qmla_error_prefix(err, "%s: ", path);
    return st;
}

static int list_tables(const char *path)
{
    qmla_error err;
    qmla_error_clear(&err);
    char **names;
    size_t n;
    if (qmla_table_list(path, &names, &n, &err))
        return cli_lib_error("export", &err);
    int rc = QMLA_EXIT_OK;
    enum { ND = sizeof derived / sizeof derived[0] };
    int has_src[ND] = {0}, has_name[ND] = {0};
    printf("%-24s %8s %8s\n", "table", "rows", "columns");
    for (size_t k = 0; k < n; k++) {
        qmla_table *t;
        for (size_t d = 0; d < ND; d++) {
            has_src[d] |= !strcmp(names[k], derived[d][1]);
            has_name[d] |= !strcmp(names[k], derived[d][0]);
        }
        if (qmla_table_read_any(path, names[k], &t, &err)) {
            rc = cli_lib_error("export", &err);
        } else {
            printf("%-24s %8zu %8zu\n", t->name, t->n_rows, t->n_cols);
            qmla_table_free(t);
        }
        free(names[k]);
    }
    free(names);
    /* the derived tables, which --table also takes */
    for (size_t d = 0; d < ND && rc == QMLA_EXIT_OK; d++) {
        qmla_table *t;
        if (!has_src[d] || has_name[d])
            continue;
        if (cli_table_load(path, derived[d][0], &t, &err)) {
            rc = cli_lib_error("export", &err);
        } else {
            printf("%-24s %8zu %8zu  (derived from %s)\n", derived[d][0], t->n_rows,
                   t->n_cols, derived[d][1]);
            qmla_table_free(t);
        }
    }
    return rc;
}

int cmd_export(int argc, char **argv)
{
    static const struct option lo[] = {{"table", required_argument, 0, 't'},
                                       {"format", required_argument, 0, 'F'},
                                       {"output", required_argument, 0, 'o'},
                                       {"list", no_argument, 0, 'l'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *table = "responses", *out = NULL, *fmt_arg = "tsv";
    int list = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 't': table = optarg; break;
        case 'F': fmt_arg = optarg; break;
        case 'o': out = optarg; break;
        case 'l': list = 1; break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("export", argc, "RESULTS.h5", NULL, NULL))
        return QMLA_EXIT_USAGE;
    const char *path = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    qmla_export_format fmt;
    if (qmla_export_format_parse(fmt_arg, &fmt, &err))
        return cli_fail("export", "--%s", err.msg);
    if (list)
        return list_tables(path);

    qmla_table *t = NULL;
    qmla_attr *prov = NULL;
    size_t n_prov = 0;
    if (cli_table_load(path, table, &t, &err) || qmla_file_attrs(path, &prov, &n_prov, &err)) {
        qmla_table_free(t);
        return cli_lib_error("export", &err);
    }
    int rc = QMLA_EXIT_OK;
    /* -o: checked like every writer's output (not the results file itself,
     * no HDF5 file, device, FIFO or folder) and written to a temporary
     * renamed into place (include/qmla/text.h: qmla_text_save) */
    if (out ? qmla_export_save(out, "output file (-o)", &path, 1, t, prov, n_prov, path, fmt,
                               &err)
            : qmla_export_write(stdout, t, prov, n_prov, path, fmt, &err))
        rc = cli_lib_error("export", &err);
    qmla_table_free(t);
    qmla_attrs_free(prov, n_prov);
    return rc;
}
