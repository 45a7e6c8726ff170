// kv_bytes: llama.cpp's own byte count of its KV / recurrent memory, for one GGUF's
// metadata under many context settings. Part of benchmarks/llamacpp_conformance.py.
//
// The model is made from the GGUF's metadata alone (llama_model_init_from_user, the
// path llama.cpp's tests/test-llama-archs.cpp uses) with no_alloc = true, so llama.cpp
// creates every tensor its architecture code wants, at full size, and allocates none of
// them; each context's memory is then read back with llama_get_memory_breakdown()
// ("context" = the llama_memory's buffers: KV cells, recurrent R/S state), which in
// no_alloc mode is ggml_backend_alloc_ctx_tensors_from_buft_size() over the cache's
// tensors: the bytes llama.cpp would allocate.
//
// Build (against a llama.cpp build tree, shared libraries):
//   g++ -std=c++17 -O1 -I$SRC/include -I$SRC/ggml/include -I$SRC/src kv_bytes.cpp \
//       -L$BUILD/bin -lllama -lggml -lggml-base -Wl,-rpath,$BUILD/bin -o kv_bytes
//
// Use: kv_bytes MODEL.gguf < settings
//   one setting per input line, whitespace separated:
//     n_ctx n_seq_max type_k type_v flash_attn(on|off|auto) swa_full(0|1) kv_unified(0|1) n_ubatch
//   one JSON object per setting on stdout:
//     {"context_bytes": N, "n_ctx": N, "log": ["llama_kv_cache: ...", ...]}  or  {"error": "..."}

#include "ggml.h"
#include "gguf.h"
#include "llama.h"
#include "llama-ext.h"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static std::vector<std::string> g_lines;
static std::string g_partial;

static ggml_log_level g_level = GGML_LOG_LEVEL_INFO;

static void log_cb(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_CONT) {
        g_partial += text;
    } else {
        g_partial = text;
        g_level = level;
    }
    if (!g_partial.empty() && g_partial.back() == '\n') {
        std::string line = g_partial.substr(0, g_partial.size() - 1);
        g_partial.clear();
        if (g_level == GGML_LOG_LEVEL_ERROR || g_level == GGML_LOG_LEVEL_WARN ||
            line.find("llama_kv_cache") != std::string::npos || line.find("llama_memory_recurrent") != std::string::npos ||
            line.find("error") != std::string::npos || line.find("failed") != std::string::npos ||
            line.find("n_ctx") == 0 || line.find("llama_context: n_ctx") != std::string::npos ||
            line.find("n_ctx_seq") != std::string::npos) {
            g_lines.push_back(line);
        }
    }
}

static std::string json_str(const std::string & s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if ((unsigned char) c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else { o += c; }
    }
    return o + "\"";
}

static bool type_from_name(const std::string & name, ggml_type & out) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * n = ggml_type_name((ggml_type) t);
        if (n && name == n) { out = (ggml_type) t; return true; }
    }
    return false;
}

static void set_nothing(ggml_tensor *, void *) {}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.gguf < settings\n", argv[0]);
        return 2;
    }
    llama_log_set(log_cb, nullptr);
    llama_backend_init();

    ggml_context * meta_ctx = nullptr;
    gguf_init_params gp = { /*no_alloc*/ true, &meta_ctx };
    gguf_context * meta = gguf_init_from_file(argv[1], gp);
    if (!meta) {
        printf("{\"error\": \"cannot read GGUF metadata\"}\n");
        return 1;
    }
    llama_model_params mp = llama_model_default_params();
    mp.no_alloc = true;
    mp.n_gpu_layers = 0;
    // Make the multi-token-prediction (nextn) layers' weights too: the from-metadata path
    // cannot skip them (it aborts on a skipped tensor), and with no_alloc they cost
    // nothing. The main context's cache filters those layers out either way
    // (il < n_layer() in llama_model::create_memory).
    mp.load_mtp = true;
    llama_model * model = llama_model_init_from_user(meta, set_nothing, nullptr, mp);
    if (!model) {
        std::string o = "{\"error\": \"model load failed\", \"log\": [";
        for (size_t i = 0; i < g_lines.size(); ++i) o += (i ? ", " : "") + json_str(g_lines[i]);
        printf("%s]}\n", o.c_str());
        return 1;
    }

    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        std::istringstream in(line);
        unsigned n_ctx, n_seq, swa_full, unified, n_ubatch;
        std::string tk, tv, fa;
        if (!(in >> n_ctx >> n_seq >> tk >> tv >> fa >> swa_full >> unified >> n_ubatch)) {
            printf("{\"error\": \"bad setting line\"}\n");
            fflush(stdout);
            continue;
        }
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = n_ctx;
        cp.n_seq_max = n_seq;
        cp.n_ubatch = n_ubatch;
        cp.n_batch = n_ubatch > 2048 ? n_ubatch : 2048;
        cp.swa_full = swa_full != 0;
        cp.kv_unified = unified != 0;
        cp.n_threads = 1;
        cp.n_threads_batch = 1;
        cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                           : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
        if (!type_from_name(tk, cp.type_k) || !type_from_name(tv, cp.type_v)) {
            printf("{\"error\": \"unknown cache type\"}\n");
            fflush(stdout);
            continue;
        }
        g_lines.clear();
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            std::string o = "{\"error\": \"context creation failed\", \"log\": [";
            for (size_t i = 0; i < g_lines.size(); ++i) o += (i ? ", " : "") + json_str(g_lines[i]);
            printf("%s]}\n", o.c_str());
            fflush(stdout);
            continue;
        }
        size_t context_bytes = 0;
        for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
            context_bytes += mb.context;
        }
        std::string o = "{\"context_bytes\": " + std::to_string(context_bytes) +
                        ", \"n_ctx\": " + std::to_string(llama_n_ctx(ctx)) +
                        ", \"n_ctx_seq\": " + std::to_string(llama_n_ctx_seq(ctx)) + ", \"log\": [";
        for (size_t i = 0; i < g_lines.size(); ++i) o += (i ? ", " : "") + json_str(g_lines[i]);
        printf("%s]}\n", o.c_str());
        fflush(stdout);
        llama_free(ctx);
    }
    llama_model_free(model);
    gguf_free(meta);
    ggml_free(meta_ctx);
    return 0;
}
