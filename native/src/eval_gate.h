/* A gate in front of a ggml eval callback (ggml_backend_sched_eval_callback).
 *
 * ggml calls a context's cb_eval for every node of every graph it computes (~1,000 calls a decoded token with the
 * bundled model); when the callback is a Python function each call crosses into the interpreter (~1 us). The gate
 * answers in C while closed, as a callback that wants nothing does (an ask: "no", so the graph is not split; a
 * node it is told about: "go on"), and forwards to the inner callback only while open. */
#ifndef EPI_EVAL_GATE_H
#define EPI_EVAL_GATE_H

#include <stdbool.h>

typedef bool (*epi_eval_callback)(void *tensor, bool ask, void *user_data);

struct epi_eval_gate {
    int open;                  /* 0: answer in C; otherwise: forward to inner */
    epi_eval_callback inner;
    void *inner_user_data;
};

/* The function to install as cb_eval, with a struct epi_eval_gate * as cb_eval_user_data. */
bool epi_eval_gate(void *tensor, bool ask, void *user_data);

#endif
