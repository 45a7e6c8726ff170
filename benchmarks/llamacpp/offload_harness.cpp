// kvgate experiment: a llama-server-like context on an RPC "GPU" whose offload_op matches CUDA's
// usage: h MODEL RPC_ENDPOINT NGL N_CTX N_SEQ UNIFIED(0/1) FA(-1/0/1) TYPE_K TYPE_V OP_OFFLOAD(0/1) UBATCH N_OUTPUTS_MAX
#include "llama.h"
#include "ggml-backend.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
static ggml_type t(const char *s){ if(!strcmp(s,"q8_0"))return GGML_TYPE_Q8_0; if(!strcmp(s,"q4_0"))return GGML_TYPE_Q4_0; if(!strcmp(s,"f32"))return GGML_TYPE_F32; return GGML_TYPE_F16; }
int main(int argc, char ** argv) {
    if (argc < 13) { fprintf(stderr, "args\n"); return 2; }
    llama_backend_init();
    ggml_backend_reg_t rpc_reg = ggml_backend_reg_by_name("RPC");
    typedef ggml_backend_reg_t (*add_t)(const char *);
    add_t add = (add_t) ggml_backend_reg_get_proc_address(rpc_reg, "ggml_backend_rpc_add_server");
    ggml_backend_register(add(argv[2]));
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = atoi(argv[3]); mp.use_extra_bufts = getenv("EXTRA") != nullptr;
    llama_model * m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 3;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = atoi(argv[4]); cp.n_seq_max = atoi(argv[5]); cp.kv_unified = atoi(argv[6]);
    int fa = atoi(argv[7]);
    cp.flash_attn_type = fa < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO : (fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED);
    cp.type_k = t(argv[8]); cp.type_v = t(argv[9]); cp.op_offload = atoi(argv[10]);
    cp.n_ubatch = atoi(argv[11]); cp.n_batch = 2048; cp.n_outputs_max = atoi(argv[12]); cp.n_outputs_max_per_seq = 1;
    llama_context * c = llama_init_from_model(m, cp);
    if (!c) return 4;
    llama_free(c); llama_model_free(m);
    return 0;
}
