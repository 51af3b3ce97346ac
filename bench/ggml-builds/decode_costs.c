// The cost of one decode of N tokens after a 64-token prompt, straight through libllama: the
// median over rounds of each N, with the sizes interleaved in every round. It compares llama.cpp
// builds (instruction sets, kernel patches) that `medusa info` cannot, since one medusa binary
// links one build. See compare.sh.
//
//     KERNELS=stock|avx2|best decode_costs MODEL.gguf [ROUNDS] [N]
//
// KERNELS picks the CPU kernels of a build with patches/ggml (default: best); N runs only that
// size, e.g. under perf.
#include "llama.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The patch's switches, absent from a build without it.
extern void ggml_cpu_medusa_set_batched_kernels(bool enabled) __attribute__((weak));
extern void ggml_cpu_medusa_set_kernel_isa(int isa) __attribute__((weak));
extern const char * ggml_cpu_medusa_kernel_isa(bool batched, int isa) __attribute__((weak));

// Applies KERNELS and says what runs, or returns false for a choice this build cannot make.
static bool choose_kernels(void) {
    const char * asked = getenv("KERNELS") ? getenv("KERNELS") : "best";
    const bool batched = strcmp(asked, "stock") != 0;
    const int isa = strcmp(asked, "avx2") == 0 ? 0 : -1;
    if (strcmp(asked, "stock") && strcmp(asked, "avx2") && strcmp(asked, "best")) {
        fprintf(stderr, "KERNELS must be stock, avx2 or best, not %s\n", asked);
        return false;
    }
    if (!ggml_cpu_medusa_set_batched_kernels) {
        printf("kernels stock (llama.cpp built without patches/ggml)\n");
        return !batched || strcmp(asked, "best") == 0;
    }
    ggml_cpu_medusa_set_batched_kernels(batched);
    ggml_cpu_medusa_set_kernel_isa(isa);
    printf("kernels %s, %s\n", batched ? "batched" : "stock", ggml_cpu_medusa_kernel_isa(batched, isa));
    return true;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void * a, const void * b) {
    const double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static void quiet(enum ggml_log_level level, const char * text, void * data) {
    (void) level; (void) text; (void) data;
}

// Fills `batch` with `n` tokens of sequence 0 from position `pos`, logits for `all` or the last.
static void fill(struct llama_batch * batch, int n, int pos, int first_token, int all) {
    batch->n_tokens = n;
    for (int i = 0; i < n; ++i) {
        batch->token[i] = first_token + 7 * i;
        batch->pos[i] = pos + i;
        batch->n_seq_id[i] = 1;
        batch->seq_id[i][0] = 0;
        batch->logits[i] = all || i == n - 1;
    }
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [ROUNDS] [N]\n", argv[0]);
        return 2;
    }
    const int rounds = argc > 2 ? atoi(argv[2]) : 30;
    int sizes[] = {1, 2, 3, 4, 5, 8, 16};
    int n_sizes = sizeof sizes / sizeof sizes[0];
    if (argc > 3) {
        sizes[0] = atoi(argv[3]);
        n_sizes = 1;
    }
    if (rounds < 1 || sizes[0] < 1 || sizes[0] > 256) {
        fprintf(stderr, "ROUNDS must be at least 1 and N from 1 to 256\n");
        return 2;
    }
    if (!choose_kernels()) {
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params params = llama_context_default_params();
    params.n_ctx = 512;
    params.n_batch = params.n_ubatch = 512;
    params.n_threads = params.n_threads_batch = 2;
    struct llama_context * ctx = llama_init_from_model(model, params);
    struct llama_batch batch = llama_batch_init(512, 0, 1);
    const int prompt = 64;
    fill(&batch, prompt, 0, 100, 0);
    if (!ctx || llama_decode(ctx, batch)) {
        fprintf(stderr, "cannot read the prompt\n");
        return 1;
    }
    const int warmup = 3;
    double * took = malloc(sizeof(double) * n_sizes * rounds);
    for (int round = 0; round < warmup + rounds; ++round) {
        for (int k = 0; k < n_sizes; ++k) {
            fill(&batch, sizes[k], prompt, 200 + round, 1);
            const double start = seconds();
            if (llama_decode(ctx, batch)) {
                fprintf(stderr, "decode of %d tokens failed\n", sizes[k]);
                return 1;
            }
            const double elapsed = seconds() - start;
            llama_memory_seq_rm(llama_get_memory(ctx), 0, prompt, -1);
            if (round >= warmup) {
                took[k * rounds + round - warmup] = elapsed;
            }
        }
    }
    double one = 0;
    for (int k = 0; k < n_sizes; ++k) {
        qsort(took + k * rounds, rounds, sizeof(double), by_value);
        const double median = took[k * rounds + rounds / 2];
        if (k == 0) {
            one = median;
        }
        printf("t(%d) %.2f ms %.2fx\n", sizes[k], median * 1e3, median / one);
    }
    free(took);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
