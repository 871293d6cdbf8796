/* fuzz/fuzz_capture.c — libFuzzer target for the capture reader.
 *
 * Each input is a recipe (fuzz/recipe.h): small random shapes, dtypes
 * (float16, bfloat16, float32/64 in both byte orders, custom floats, integer
 * types), attribute presence/types/values, missing or extra datasets, wrong
 * ranks, wrong link kinds, non-finite values, truncation. The recipe builds
 * the file in memory (core driver, no backing store), takes its image
 * (H5Fget_file_image), and qmla_recipe_run opens it with
 * qmla_capture_open_image, loads every layer and cell, frees, and checks the
 * reader against the recipe. A disagreement aborts (a crash for libFuzzer).
 *
 * Build and run: fuzz/run.sh SECONDS [BUILD_DIR] (clang, -Dfuzz=true).
 */
#include "recipe.h"

#include <hdf5.h>

#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    H5open();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) /* recipes never need more; keep each input cheap */
        return 0;
    char why[2048];
    if (qmla_recipe_run(data, size, why, sizeof why) == 1) {
        fprintf(stderr, "qmla fuzz: reader violation: %s\n", why);
        abort();
    }
    return 0;
}
