/* fuzz/recipe.h — decode fuzzer input bytes into a qmla-capture file built in
 * memory (HDF5 core driver), and check the reader against what the recipe
 * intended.
 *
 * The bytes are read one at a time as choices; an exhausted input reads as
 * zeros, and choice 0 is always the well-formed option, so the empty input
 * builds a small valid capture. The builder counts every deliberate defect
 * (missing or mistyped attribute or dataset, wrong shape, wrong link kind,
 * bad value, truncated image ...) and, for each layer and cell, whether a
 * loaded tensor holds a non-finite value after conversion to float32 (it
 * reads each float dataset back through HDF5 to know). qmla_recipe_run then
 * demands that the reader agrees: open succeeds exactly when there is no
 * defect, loads fail with QMLA_ENONFINITE exactly where non-finite values
 * were stored, every message names the image and says expected/found, and no
 * HDF5 identifier outlives the capture.
 *
 * Used by fuzz/fuzz_capture.c (libFuzzer) and fuzz/regress_main.c (the
 * test_fuzz_regress test over tests/fuzz-regress/).
 */
#ifndef QMLA_FUZZ_RECIPE_H
#define QMLA_FUZZ_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#define QMLA_RECIPE_MAX_LAYERS 4
#define QMLA_RECIPE_MAX_CELLS 3
#define QMLA_RECIPE_LABEL "fuzz.h5"

typedef struct qmla_recipe {
    unsigned char *image;  /* HDF5 file image (malloc'd) */
    size_t len;
    int defects;           /* deliberate structural defects: open must fail */
    char first_defect[192];
    int truncated;         /* image cut short: open must fail */
    int n_layers;          /* layer groups built */
    int layer_index[QMLA_RECIPE_MAX_LAYERS];    /* in ascending order */
    int layer_nonfinite[QMLA_RECIPE_MAX_LAYERS]; /* weights hold NaN/inf */
    int n_cells[QMLA_RECIPE_MAX_LAYERS];
    char cell_name[QMLA_RECIPE_MAX_LAYERS][QMLA_RECIPE_MAX_CELLS][256];
    int cell_nonfinite[QMLA_RECIPE_MAX_LAYERS][QMLA_RECIPE_MAX_CELLS];
    size_t cell_N[QMLA_RECIPE_MAX_LAYERS][QMLA_RECIPE_MAX_CELLS];
    size_t cell_T[QMLA_RECIPE_MAX_LAYERS][QMLA_RECIPE_MAX_CELLS];
    int cell_pre[QMLA_RECIPE_MAX_LAYERS][QMLA_RECIPE_MAX_CELLS]; /* all 4 */
} qmla_recipe;

/* Build the image. Returns 0, or -1 when HDF5 refused to build this recipe
 * (the input is then skipped). Free with qmla_recipe_free. */
int qmla_recipe_build(const uint8_t *data, size_t size, qmla_recipe *r);
void qmla_recipe_free(qmla_recipe *r);

/* Build, open with qmla_capture_open_image, load every layer and cell, close,
 * and compare with the recipe. Returns 0 when the reader behaved, 1 on a
 * violation (described in why), -1 when the recipe was skipped. */
int qmla_recipe_run(const uint8_t *data, size_t size, char *why, size_t cap);

#endif
