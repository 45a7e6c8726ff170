/* Benchmark peer (not part of kvgate): the exact LRU hit curve of a hashed JSONL trace
 * (Mooncake keys: input_length, hash_ids), in plain C, for benchmarks/tier_bench.py.
 *
 * The same rule as kvgate.tier.stack: a block's stack distance is 1 + the distinct blocks
 * touched since its last touch (a Fenwick tree over access times marks each block's last
 * touch; Bennett & Kruskal 1975); per request the running maximum m_j of its blocks'
 * distances, and block j's tokens (min(j*B+B, L) - min(j*B, L)) hit at every capacity >= m_j.
 * Ids below 2^28 index the last-touch array directly, larger ones go through an
 * open-addressing table. Times are renumbered (compacted) when the tree fills.
 *
 * Build: cc -O2 -o peer tier_fenwick_peer.c   Run: peer TRACE.jsonl BLOCK_TOKENS CAP...
 * Prints: requests, accesses, distinct, prompt tokens, unbounded hit tokens, hits at each
 * CAP (blocks), peak RSS (KiB) - one "key value" per line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define DIRECT (1u << 28)
static int32_t *last; static int64_t nlast;           /* per dense id: last time, -1 never */
static int32_t *fen, *inv; static int64_t size, t;     /* Fenwick over times; time -> id */
static int64_t *hist; static int64_t nhist, live;
static uint64_t *hkeys; static int32_t *hvals; static int64_t hcap, hn, next_code = DIRECT;

static void *xrealloc(void *p, size_t n) { void *q = realloc(p, n); if (!q) { perror("realloc"); exit(1); } return q; }

static int64_t code_of(uint64_t id) {
    if (id < DIRECT) return (int64_t)id;
    if (2 * (hn + 1) > hcap) {  /* grow the table */
        int64_t oc = hcap; uint64_t *ok = hkeys; int32_t *ov = hvals;
        hcap = hcap ? 2 * hcap : 1 << 16;
        hkeys = malloc(hcap * 8); hvals = malloc(hcap * 4); memset(hkeys, 0xff, hcap * 8);
        for (int64_t i = 0; i < oc; i++) if (ok[i] != UINT64_MAX) {
            uint64_t h = (ok[i] * 0x9E3779B97F4A7C15ull) & (hcap - 1);
            while (hkeys[h] != UINT64_MAX) h = (h + 1) & (hcap - 1);
            hkeys[h] = ok[i]; hvals[h] = ov[i];
        }
        free(ok); free(ov);
    }
    uint64_t h = (id * 0x9E3779B97F4A7C15ull) & (hcap - 1);
    while (hkeys[h] != UINT64_MAX && hkeys[h] != id) h = (h + 1) & (hcap - 1);
    if (hkeys[h] == UINT64_MAX) { hkeys[h] = id; hvals[h] = (int32_t)(next_code++ - DIRECT); hn++; }
    return DIRECT + hvals[h];
}

static void ensure_last(int64_t c) {
    if (c < nlast) return;
    int64_t n = nlast ? nlast : 1 << 16;
    while (n <= c) n += n / 2;
    last = xrealloc(last, n * 4);
    for (int64_t i = nlast; i < n; i++) last[i] = -1;
    nlast = n;
}

static void compact(void) {  /* renumber live marks 0..live-1 in time order, rebuild the tree */
    int64_t k = 0;
    for (int64_t s = 0; s < t; s++) { int32_t c = inv[s]; if (last[c] == s) { last[c] = (int32_t)k; inv[k++] = c; } }
    t = k;
    int64_t ns = 2 * k + (1 << 16);
    fen = xrealloc(fen, (ns + 1) * 4); inv = xrealloc(inv, ns * 4);
    memset(fen, 0, (ns + 1) * 4);
    for (int64_t i = 1; i <= ns; i++) { if (i <= k) fen[i] += 1; int64_t j = i + (i & -i); if (j <= ns) fen[j] += fen[i]; }
    size = ns;
}

static int64_t access(int64_t c) {  /* returns the stack distance, INT64_MAX for a first touch */
    ensure_last(c);
    if (t >= size) compact();
    int64_t d = INT64_MAX, p = last[c];
    if (p >= 0) {
        int64_t s = 0;
        for (int64_t i = p + 1; i > 0; i -= i & -i) s += fen[i];
        d = live - s + 1;
        for (int64_t i = p + 1; i <= size; i += i & -i) fen[i] -= 1;
    } else live++;
    for (int64_t i = t + 1; i <= size; i += i & -i) fen[i] += 1;
    last[c] = (int32_t)t; inv[t] = (int32_t)c; t++;
    return d;
}

static void add_hist(int64_t m, int64_t w) {
    if (m >= nhist) { int64_t n = nhist ? nhist : 1 << 16; while (n <= m) n *= 2;
        hist = xrealloc(hist, n * 8); memset(hist + nhist, 0, (n - nhist) * 8); nhist = n; }
    hist[m] += w;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s TRACE.jsonl BLOCK_TOKENS [CAP...]\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "rb"); if (!f) { perror(argv[1]); return 2; }
    int64_t B = atoll(argv[2]), requests = 0, accesses = 0, prompt = 0;
    size_t cap = 1 << 26, have = 0; char *buf = malloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + have, 1, cap - have, f); have += got;
        char *p = buf, *end = buf + have;
        for (;;) {
            char *nl = memchr(p, '\n', end - p);
            if (!nl) { if (got == 0 && p < end) nl = end; else break; }
            *nl = 0;
            char *il = strstr(p, "\"input_length\""), *h = strstr(p, "\"hash_ids\"");
            if (il && h) {
                int64_t L = strtoll(strchr(il + 14, ':') + 1, NULL, 10), j = 0, m = 0;
                char *q = strchr(h + 10, '[') + 1;
                requests++; prompt += L;
                for (;;) {
                    while (*q == ' ' || *q == ',') q++;
                    if (*q == ']' || *q == 0) break;
                    uint64_t id = strtoull(q, &q, 10);
                    int64_t lo = j * B, hi = lo + B, delta = (hi < L ? hi : L) - (lo < L ? lo : L);
                    int64_t d = access(code_of(id));
                    accesses++; j++;
                    if (d > m) m = d;
                    if (m != INT64_MAX) add_hist(m, delta);
                }
            }
            p = nl + 1;
            if (p > end) break;
        }
        if (got == 0) break;
        have = p < end ? (size_t)(end - p) : 0;
        memmove(buf, p, have);
    }
    int64_t unb = 0; for (int64_t i = 0; i < nhist; i++) unb += hist[i];
    printf("requests %lld\naccesses %lld\ndistinct %lld\nprompt_tokens %lld\nunbounded_hit_tokens %lld\n",
           (long long)requests, (long long)accesses, (long long)live, (long long)prompt, (long long)unb);
    for (int a = 3; a < argc; a++) {
        int64_t c = atoll(argv[a]), s = 0;
        for (int64_t i = 0; i <= c && i < nhist; i++) s += hist[i];
        printf("hit_tokens_at_%lld %lld\n", (long long)c, (long long)s);
    }
    struct rusage ru; getrusage(RUSAGE_SELF, &ru);
    printf("peak_rss_kib %ld\n", ru.ru_maxrss);
    return 0;
}
