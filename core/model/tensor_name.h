/* ggml's tensor names: a block's tensors are "blk.<n>.<rest>" (llama.cpp's
 * LLM_TENSOR_NAMES), the others have no block ("token_embd.weight", "output.weight").
 * The one parser of that name every layer uses. */
#ifndef QL_MODEL_TENSOR_NAME_H
#define QL_MODEL_TENSOR_NAME_H

/* The largest block number a name may carry: more than any model's block count, small
 * enough that every caller's int and every map sized by it hold it. */
#define QL_TENSOR_BLOCK_MAX 1000000

/* The block of a tensor named "blk.<n>.<rest>" (n in decimal digits, at most
 * QL_TENSOR_BLOCK_MAX), or -1 for any other name. rest (may be NULL) receives the part
 * after "blk.<n>." for a block's tensor, else the whole name. */
int ql_tensor_block(const char *name, const char **rest);

#endif
