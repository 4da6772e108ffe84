#include "eval_gate.h"

bool epi_eval_gate(void *tensor, bool ask, void *user_data)
{
    const struct epi_eval_gate *gate = (const struct epi_eval_gate *)user_data;
    if (!gate->open || gate->inner == 0) return !ask;
    return gate->inner(tensor, ask, gate->inner_user_data);
}
