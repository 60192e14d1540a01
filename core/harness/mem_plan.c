/* The shares of a memory budget (mem_plan.h). */
#include "harness/mem_plan.h"

size_t ql_mem_side(size_t budget)
{
    return budget / 2;
}

size_t ql_mem_hold(size_t bytes, size_t left)
{
    return bytes <= left / 2 ? bytes : 0;
}
