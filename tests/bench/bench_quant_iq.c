/* Single-threaded throughput of the IQ lattice formats on a fixed 256 x 4096
 * matrix (Student-t-like weights, a smooth positive imatrix): seconds and MB/s
 * of f32 input for quantize (with and without importance weights where ggml
 * allows it) and dequantize. Run with `meson test -C build --benchmark`. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"
#include "formats/types.h"

enum { ROWS = 256, COLS = 4096 };

static uint64_t rng_state = 12345;

static double normal(void)
{
    return ql_rng_gauss(&rng_state);
}

int main(void)
{
    static const char *names[] = {"IQ3_S",   "IQ3_XXS", "IQ2_S", "IQ2_XS",
                                  "IQ2_XXS", "IQ1_S",   "IQ1_M"};
    float *x = malloc(sizeof(float) * ROWS * COLS), *y = malloc(sizeof(float) * ROWS * COLS);
    float *imat = malloc(sizeof(float) * COLS);
    void *q =
        malloc((size_t)ROWS * COLS); /* more than any IQ type needs (<= 3.5 bits per weight) */
    if (!x || !y || !imat || !q)
        return 1;
    for (int i = 0; i < ROWS * COLS; i++) {
        double g = normal(),
               s = (normal() * normal() + normal() * normal() + normal() * normal()) / 3;
        x[i] = (float)(0.02 * g / sqrt(fabs(s) + 0.05));
    }
    for (int j = 0; j < COLS; j++)
        imat[j] = (float)(0.25 + ((j * 37) % 101) / 25.0);
    double mb = (double)ROWS * COLS * sizeof(float) / 1e6;
    printf("%-8s %14s %14s %14s\n", "type", "quant imat", "quant no-imat", "dequant");
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        const ql_type_traits *tr = ql_type_by_name(names[t]);
        ql_error err;
        double t0 = ql_now();
        if (ql_type_prepare(tr->type, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double t_prep = ql_now() - t0;
        t0 = ql_now();
        tr->quantize(x, q, ROWS, COLS, imat);
        double t_qi = ql_now() - t0;
        double t_qn = -1;
        if (!tr->requires_imatrix) {
            t0 = ql_now();
            tr->quantize(x, q, ROWS, COLS, NULL);
            t_qn = ql_now() - t0;
        }
        t0 = ql_now();
        tr->dequantize(q, y, ROWS, COLS);
        double t_dq = ql_now() - t0;
        char qn[32] = "-";
        if (t_qn >= 0)
            snprintf(qn, sizeof qn, "%.3fs %5.1f", t_qn, mb / t_qn);
        printf("%-8s %7.3fs %5.1f %14s %7.4fs %5.0f   (codebook load %.3fs)\n", names[t], t_qi,
               mb / t_qi, qn, t_dq, mb / t_dq, t_prep);
    }
    printf("(seconds and MB/s of f32 input, %d x %d, one thread)\n", ROWS, COLS);
    free(x);
    free(y);
    free(imat);
    free(q);
    return 0;
}
