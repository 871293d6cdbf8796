/* fuzz/regress_main.c — replay the fuzzer's saved inputs without libFuzzer.
 *
 * Usage: test_fuzz_regress DIR   (meson test test_fuzz_regress: DIR is
 * tests/fuzz-regress). Every file in DIR (and the empty input) is decoded as
 * a recipe (fuzz/recipe.h), built, opened with the reader, loaded and
 * checked exactly as in the fuzzer: the reader must not crash, must return
 * the status the recipe implies, with a message naming the image, and must
 * leave no HDF5 identifier open. Prints "N passed, M failed".
 */
#include "recipe.h"
#include "../tests/support/check.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int replay(const char *label, const uint8_t *data, size_t size)
{
    char why[2048];
    int rc = qmla_recipe_run(data, size, why, sizeof why);
    CHECK(rc == 0 || rc == -1, "%s: %s", label, why);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    replay("(empty input)", (const uint8_t *)"", 0);
    DIR *d = opendir(argv[1]);
    CHECK(d != NULL, "cannot open %s", argv[1]);
    if (!d)
        return check_summary("test_fuzz_regress");
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn)
            break;
        names = nn;
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int skipped = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], names[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL, "cannot open %s", path);
        if (!f)
            continue;
        uint8_t buf[8192];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (replay(names[i], buf, len) == -1)
            skipped++;
        free(names[i]);
    }
    free(names);
    printf("replayed %zu inputs (%d skipped: HDF5 refused the recipe)\n", n,
           skipped);
    return check_summary("test_fuzz_regress");
}
