/* tracekit.trace._fastscan: a piece of a Kineto trace (a JSON array of events) -> columns,
 * without one Python object per event.
 *
 * It reads exactly what tracekit/trace/_schema.py's msgspec types read (Event, Args) and
 * nothing else, and only the common shapes of it: every value of the expected type, times
 * written as integers or with at most three decimals, strings without odd escapes. Anything
 * else (a syntax error, a value of another type, a lone surrogate, a number out of range, bytes
 * that are not UTF-8 in a string tracekit keeps, nesting deeper than MAX_DEPTH) makes scan()
 * return None, and the caller decodes the piece with msgspec as before: the result never
 * depends on this module, only the speed does (tests/tracekit/test_fastscan.py compares the
 * two on generated pieces).
 *
 * scan(buffer) -> None | (n_elements, strings, x, mem, threads, fixups)
 *   strings:  the distinct name/cat/ph strings of the piece (codes index it)
 *   x:        bytes of the complete events' columns, X_COLS int64 (name and cat codes, cat -1
 *             when absent; dur as float64 bits; args offsets -1 when absent; the launch hash:
 *             FNV-1a over the launch configuration's keys and value texts, 0 when its args
 *             have none of them, see LAUNCH_KEYS), row-major
 *   mem:      bytes of the [memory] events' columns, M_COLS int64, row-major
 *   threads:  [(pid, tid, name)] of thread_name metadata events with int pid and tid
 *   fixups:   [(column, row, str)] pid/tid values that are strings (0: x pid, 1: x tid,
 *             2: mem tid): their column holds 0 until the caller reads the string
 * The GIL is released while the bytes are scanned; Python objects are made afterwards.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#if defined(__GLIBC__)
#include <locale.h>
#endif

#define MAX_DEPTH 256
#define BAIL (-1)
#define NOMEM (-2)

/* columns of a complete event */
enum { XC_NAME, XC_CAT, XC_PID, XC_TID, XC_TS, XC_DUR, XC_EXT, XC_EXTL, XC_CORR, XC_STREAM,
       XC_DEVICE, XC_NBYTES, XC_ASTART, XC_AEND, XC_LAUNCH, X_COLS };
/* A kernel's launch configuration (tracekit/trace/_schema.py's Launch): their values are
 * skipped as any other key's, and hashed with their key's index, so that the loader reads each
 * distinct configuration once (from the first event of each hash) instead of every kernel's. */
static const char *LAUNCH_KEYS[] = {"grid", "block", "registers per thread", "shared memory",
                                    "est. achieved occupancy %", NULL};
#define FNV_BASIS 1469598103934665603ULL
#define FNV_PRIME 1099511628211ULL
static const Py_ssize_t LAUNCH_LEN[] = {4, 5, 20, 13, 25};
static int launch_key_index(const unsigned char *k, Py_ssize_t kn) {
    int j;
    switch (kn) { /* one length each: at most one comparison a skipped key */
    case 4: j = 0; break;
    case 5: j = 1; break;
    case 20: j = 2; break;
    case 13: j = 3; break;
    case 25: j = 4; break;
    default: return -1;
    }
    return memcmp(k, LAUNCH_KEYS[j], (size_t)LAUNCH_LEN[j]) == 0 ? j : -1;
}
static uint64_t fnv(uint64_t h, const unsigned char *s, const unsigned char *e) {
    for (; s < e; s++) { h ^= *s; h *= FNV_PRIME; }
    return h;
}
/* columns of a [memory] event */
enum { MC_TS, MC_TID, MC_DTYPE, MC_DID, MC_BYTES, MC_TALLOC, MC_TRES, MC_ADDR, M_COLS };

/* The Args keys whose integer values are kept (order: the A_* indexes). */
enum { A_EXT, A_EXTL, A_CORR, A_STREAM, A_DEVICE, A_NBYTES, A_MBYTES, A_TALLOC, A_TRES, A_ADDR,
       A_DTYPE, A_DID, A_KEPT };
static const char *INT_KEYS[] = {
    "External id", "external id", "correlation", "stream", "device", "bytes", "Bytes",
    "Total Allocated", "Total Reserved", "Addr", "Device Type", "Device Id",
    /* validated only (integers in Args) */
    "wait_on_stream", "wait_on_cuda_event_record_corr_id", "wait_on_cuda_event_id",
    "Process Group ID", "Group size", "In msg nelems", "Out msg nelems", "Seq", "Rank",
    "Src Rank", "Dst Rank", NULL};
static const char *STR_KEYS[] = {
    "name", /* first: the label of a metadata event */
    "Collective name", "Process Group Name", "Process Group Description", "Process Group Ranks",
    "In split size", "Out split size", "dtype", NULL};
static int N_INT, N_STR;
/* every key, integers first: BY_LEN[length] is the first key of that length, NEXT the next */
static const char *KEYS[48];
static int BY_LEN[64], NEXT[48];

typedef struct { char *p; Py_ssize_t n, cap; } Buf; /* bytes, grown by doubling */

static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->n + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    char *p = realloc(b->p, (size_t)cap);
    if (!p) return NOMEM;
    b->p = p; b->cap = cap;
    return 0;
}

/* one row of int64s */
static int buf_row(Buf *b, const int64_t *row, int ncols) {
    Py_ssize_t sz = (Py_ssize_t)ncols * 8;
    if (buf_reserve(b, sz)) return NOMEM;
    memcpy(b->p + b->n, row, (size_t)sz);
    b->n += sz;
    return 0;
}

typedef struct { uint64_t hash; Py_ssize_t off, len; int32_t code; } Slot;

typedef struct {
    const unsigned char *s, *end, *base;
    Buf x, mem, arena, strs /* (off, len) per code */, threads /* pid, tid, off, len */,
        fixups /* col, row, off, len */, scratch;
    Slot *slots; Py_ssize_t nslots, nstr;
    Py_ssize_t n_elements;
} P;

static uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        p += 8; n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int arena_add(P *p, const unsigned char *s, Py_ssize_t n, Py_ssize_t *off) {
    if (buf_reserve(&p->arena, n)) return NOMEM;
    memcpy(p->arena.p + p->arena.n, s, (size_t)n);
    *off = p->arena.n;
    p->arena.n += n;
    return 0;
}

/* the code of the string s[0:n] in this piece's table */
static int intern(P *p, const unsigned char *s, Py_ssize_t n, int32_t *code) {
    if (p->nstr * 2 >= p->nslots) { /* grow: empty slots have code -1 */
        Py_ssize_t ns = p->nslots ? p->nslots * 2 : 1024;
        Slot *t = malloc((size_t)ns * sizeof(Slot));
        if (!t) return NOMEM;
        for (Py_ssize_t i = 0; i < ns; i++) t[i].code = -1;
        for (Py_ssize_t i = 0; i < p->nslots; i++) {
            if (p->slots[i].code < 0) continue;
            Py_ssize_t j = (Py_ssize_t)(p->slots[i].hash & (uint64_t)(ns - 1));
            while (t[j].code >= 0) j = (j + 1) & (ns - 1);
            t[j] = p->slots[i];
        }
        free(p->slots);
        p->slots = t; p->nslots = ns;
    }
    uint64_t h = hash_bytes(s, n);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(p->nslots - 1));
    for (;;) {
        Slot *sl = &p->slots[j];
        if (sl->code < 0) break;
        if (sl->hash == h && sl->len == n && memcmp(p->arena.p + sl->off, s, (size_t)n) == 0) {
            *code = sl->code;
            return 0;
        }
        j = (j + 1) & (p->nslots - 1);
    }
    Py_ssize_t off;
    if (arena_add(p, s, n, &off)) return NOMEM;
    int64_t row[2] = {off, n};
    if (buf_row(&p->strs, row, 2)) return NOMEM;
    Slot *sl = &p->slots[j];
    sl->hash = h; sl->off = off; sl->len = n; sl->code = (int32_t)p->nstr;
    *code = (int32_t)p->nstr++;
    return 0;
}

static inline void ws(P *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t')) p->s++;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const unsigned char *s, const unsigned char *end, unsigned *v) {
    if (end - s < 4) return BAIL;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s[i]);
        if (h < 0) return BAIL;
        r = r * 16 + (unsigned)h;
    }
    *v = r;
    return 0;
}

/* A string at p->s (the opening quote). Its content, unescaped, in (*out, *n): a pointer into
 * the piece when it has no escape, else into p->scratch (valid until the next string).
 * *high: whether any byte >= 0x80 is in it. Lone or mismatched surrogates, control bytes and
 * bad escapes bail (msgspec refuses them, even in values it skips). */
static int str(P *p, const unsigned char **out, Py_ssize_t *n, int *high) {
    const unsigned char *s = p->s + 1, *end = p->end, *start = s;
    int hi = 0;
    /* 8 bytes at a time while none is a quote, a backslash, a control byte or >= 0x80 */
    while (end - s >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
        uint64_t special = ((q - ones) & ~q) | ((b - ones) & ~b) | (w - ones * 0x20) | w;
        if (special & highs) break;
        s += 8;
    }
    while (s < end && *s != '"' && *s != '\\') {
        if (*s < 0x20) return BAIL;
        hi |= *s & 0x80;
        s++;
    }
    if (s >= end) return BAIL;
    if (*s == '"') {
        *out = start; *n = s - start; *high = hi != 0;
        p->s = s + 1;
        return 0;
    }
    p->scratch.n = 0;
    if (buf_reserve(&p->scratch, (s - start) + 64)) return NOMEM;
    memcpy(p->scratch.p, start, (size_t)(s - start));
    p->scratch.n = s - start;
    while (s < end && *s != '"') {
        if (buf_reserve(&p->scratch, 8)) return NOMEM;
        unsigned char c = *s;
        if (c < 0x20) return BAIL;
        if (c != '\\') {
            hi |= c & 0x80;
            p->scratch.p[p->scratch.n++] = (char)c;
            s++;
            continue;
        }
        if (s + 1 >= end) return BAIL;
        c = s[1];
        s += 2;
        char e;
        switch (c) {
        case '"': e = '"'; break;
        case '\\': e = '\\'; break;
        case '/': e = '/'; break;
        case 'b': e = '\b'; break;
        case 'f': e = '\f'; break;
        case 'n': e = '\n'; break;
        case 'r': e = '\r'; break;
        case 't': e = '\t'; break;
        case 'u': {
            unsigned u;
            if (hex4(s, end, &u)) return BAIL;
            s += 4;
            if (u >= 0xDC00 && u <= 0xDFFF) return BAIL;
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned lo;
                if (end - s < 6 || s[0] != '\\' || s[1] != 'u' || hex4(s + 2, end, &lo)) return BAIL;
                if (lo < 0xDC00 || lo > 0xDFFF) return BAIL;
                s += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            char *o = p->scratch.p + p->scratch.n;
            if (u < 0x80) { o[0] = (char)u; p->scratch.n += 1; }
            else if (u < 0x800) { o[0] = (char)(0xC0 | (u >> 6)); o[1] = (char)(0x80 | (u & 0x3F)); p->scratch.n += 2; }
            else if (u < 0x10000) { o[0] = (char)(0xE0 | (u >> 12)); o[1] = (char)(0x80 | ((u >> 6) & 0x3F)); o[2] = (char)(0x80 | (u & 0x3F)); p->scratch.n += 3; }
            else { o[0] = (char)(0xF0 | (u >> 18)); o[1] = (char)(0x80 | ((u >> 12) & 0x3F)); o[2] = (char)(0x80 | ((u >> 6) & 0x3F)); o[3] = (char)(0x80 | (u & 0x3F)); p->scratch.n += 4; }
            if (u >= 0x80) hi = 0x80;
            continue;
        }
        default: return BAIL;
        }
        p->scratch.p[p->scratch.n++] = e;
    }
    if (s >= end) return BAIL;
    p->s = s + 1;
    *out = (const unsigned char *)p->scratch.p; *n = p->scratch.n; *high = hi != 0;
    return 0;
}

/* A JSON number at p->s: its token [*t0, p->s), whether it has a fraction or an exponent. */
static int number(P *p, const unsigned char **t0, int *has_frac, int *has_exp) {
    const unsigned char *s = p->s, *end = p->end;
    *t0 = s;
    *has_frac = *has_exp = 0;
    if (s < end && *s == '-') s++;
    if (s >= end) return BAIL;
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9') { while (s < end && *s >= '0' && *s <= '9') s++; }
    else return BAIL;
    if (s < end && *s == '.') {
        s++;
        if (s >= end || *s < '0' || *s > '9') return BAIL;
        while (s < end && *s >= '0' && *s <= '9') s++;
        *has_frac = 1;
    }
    if (s < end && (*s == 'e' || *s == 'E')) {
        s++;
        if (s < end && (*s == '+' || *s == '-')) s++;
        if (s >= end || *s < '0' || *s > '9') return BAIL;
        while (s < end && *s >= '0' && *s <= '9') s++;
        *has_exp = 1;
    }
    p->s = s;
    return 0;
}

/* An integer JSON number (msgspec's int: no fraction, no exponent) within int64. */
static int int64_at(P *p, int64_t *v) {
    const unsigned char *t0;
    int fr, ex;
    if (number(p, &t0, &fr, &ex)) return BAIL;
    if (fr || ex) return BAIL;
    const unsigned char *s = t0;
    int neg = *s == '-';
    if (neg) s++;
    uint64_t acc = 0;
    int nd = (int)(p->s - s);
    if (nd > 19) return BAIL;
    for (; s < p->s; s++) acc = acc * 10 + (uint64_t)(*s - '0');
    if (!neg && acc > (uint64_t)INT64_MAX) return BAIL;
    if (neg && acc > (uint64_t)INT64_MAX + 1) return BAIL;
    *v = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#if defined(__GLIBC__)
static locale_t C_LOCALE;
#endif

/* A JSON number as msgspec's float (correctly rounded; finite, else msgspec refuses it). */
static int double_at(P *p, double *v) {
    const unsigned char *t0;
    int fr, ex;
    if (number(p, &t0, &fr, &ex)) return BAIL;
    const unsigned char *s = t0;
    int neg = *s == '-';
    if (neg) s++;
    if (!ex) {  /* exact mantissa / exact power of ten: one correctly rounded division */
        uint64_t m = 0;
        int nd = 0, nfrac = 0, seen_dot = 0;
        for (; s < p->s; s++) {
            if (*s == '.') { seen_dot = 1; continue; }
            m = m * 10 + (uint64_t)(*s - '0');
            if (m) nd++;
            if (seen_dot) nfrac++;
            if (nd > 15 || nfrac > 22) break;
        }
        if (s == p->s) {
            double d = (double)m / POW10[nfrac];
            *v = neg ? -d : d;
            return 0;
        }
    }
    Py_ssize_t len = p->s - t0;
    if (len > 60) return BAIL;
    char tmp[64];
    memcpy(tmp, t0, (size_t)len);
    tmp[len] = 0;
#if defined(__GLIBC__)
    double d = strtod_l(tmp, NULL, C_LOCALE);
#else
    double d = strtod(tmp, NULL);
#endif
    if (!(d - d == 0)) return BAIL; /* inf */
    /* strtod gives +-0 or a subnormal for a tiny value, as msgspec does */
    *v = d;
    return 0;
}

/* A time in microseconds -> exact int64 nanoseconds: integers and up to three decimals only,
 * and within tracekit's range (|ns| <= INT64_MAX - 1); anything else bails (the Python path
 * reads it: rounding, exponents, values it counts as unreadable). */
static int ts_ns(const unsigned char *s, const unsigned char *end, int64_t *v) {
    int neg = 0;
    if (s < end && *s == '-') { neg = 1; s++; }
    uint64_t acc = 0;
    int nd = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (++nd > 19) return BAIL;
        acc = acc * 10 + (uint64_t)(*s++ - '0');
    }
    if (nd == 0) return BAIL;
    int nf = 0;
    uint64_t frac = 0;
    if (s < end && *s == '.') {
        s++;
        while (s < end && *s >= '0' && *s <= '9') {
            if (++nf > 3) return BAIL;
            frac = frac * 10 + (uint64_t)(*s++ - '0');
        }
    }
    if (s != end) return BAIL; /* exponent */
    for (int i = nf; i < 3; i++) frac *= 10;
    const uint64_t maxns = (uint64_t)INT64_MAX - 1;
    if (acc > (maxns - frac) / 1000) return BAIL;
    uint64_t ns = acc * 1000 + frac;
    if (ns > maxns) return BAIL;
    *v = neg ? -(int64_t)ns : (int64_t)ns;
    return 0;
}

/* after a member of an object or an array: 0 if a ',' follows (another member), 1 if
 * ``close`` does (the container ends), BAIL otherwise */
static int next_member(P *p, unsigned char close) {
    ws(p);
    if (p->s >= p->end) return BAIL;
    if (*p->s == ',') { p->s++; return 0; }
    if (*p->s == close) { p->s++; return 1; }
    return BAIL;
}

static int skip(P *p, int depth);

static int skip_container(P *p, int depth, unsigned char close) {
    if (depth > MAX_DEPTH) return BAIL;
    p->s++;
    ws(p);
    if (p->s < p->end && *p->s == close) { p->s++; return 0; }
    for (;;) {
        ws(p);
        if (close == '}') {
            const unsigned char *k; Py_ssize_t kn; int hi, r;
            if (p->s >= p->end || *p->s != '"') return BAIL;
            if ((r = str(p, &k, &kn, &hi))) return r;
            ws(p);
            if (p->s >= p->end || *p->s != ':') return BAIL;
            p->s++;
            ws(p);
        }
        int r = skip(p, depth + 1);
        if (r) return r;
        if ((r = next_member(p, close))) return r == 1 ? 0 : r;
    }
}

/* any JSON value, validated as msgspec validates a value it skips */
static int skip(P *p, int depth) {
    if (p->s >= p->end) return BAIL;
    unsigned char c = *p->s;
    if (c == '"') {
        const unsigned char *o; Py_ssize_t n; int hi;
        return str(p, &o, &n, &hi);
    }
    if (c == '{') return skip_container(p, depth, '}');
    if (c == '[') return skip_container(p, depth, ']');
    if (c == '-' || (c >= '0' && c <= '9')) {
        const unsigned char *t0; int fr, ex;
        return number(p, &t0, &fr, &ex);
    }
    if (p->end - p->s >= 4 && memcmp(p->s, "true", 4) == 0) { p->s += 4; return 0; }
    if (p->end - p->s >= 5 && memcmp(p->s, "false", 5) == 0) { p->s += 5; return 0; }
    if (p->end - p->s >= 4 && memcmp(p->s, "null", 4) == 0) { p->s += 4; return 0; }
    return BAIL;
}

typedef struct {
    int has_ph, has_name, has_pid, has_tid, has_ts, has_dur, has_args;
    int32_t ph, name, cat;
    int pid_str, tid_str; /* the value is a string: (off, len) in the arena */
    int64_t pid, tid, pid_off, pid_len, tid_off, tid_len;
    const unsigned char *ts0, *ts1;
    int ts_is_num;
    double dur;
    int64_t a[A_KEPT];
    int64_t astart, aend, label_off, label_len;
    uint64_t launch;
} Ev;

static int args_object(P *p, Ev *e) {
    for (int i = 0; i < A_KEPT; i++) e->a[i] = -1;
    e->label_len = 0;
    e->launch = 0;
    e->astart = p->s - p->base;
    p->s++;
    ws(p);
    if (p->s < p->end && *p->s == '}') { p->s++; e->aend = p->s - p->base; return 0; }
    for (;;) {
        const unsigned char *k; Py_ssize_t kn; int hi, r;
        ws(p);
        if (p->s >= p->end || *p->s != '"') return BAIL;
        if ((r = str(p, &k, &kn, &hi))) return r;
        if (k < p->base || k >= p->end || hi) return BAIL; /* an escaped key: msgspec unescapes it */
        ws(p);
        if (p->s >= p->end || *p->s != ':') return BAIL;
        p->s++;
        ws(p);
        int done = 0, ki = kn < 64 ? BY_LEN[kn] : -1;
        for (; ki >= 0 && !done; ki = NEXT[ki]) {
            if (KEYS[ki][0] != (char)k[0] || memcmp(k, KEYS[ki], (size_t)kn) != 0) continue;
            done = 1;
            if (ki < N_INT) {
                int64_t v;
                if (p->s >= p->end || !(*p->s == '-' || (*p->s >= '0' && *p->s <= '9'))) return BAIL;
                if (int64_at(p, &v)) return BAIL;
                if (ki < A_KEPT) e->a[ki] = v;
            } else {
                const unsigned char *o; Py_ssize_t n; int h;
                if (p->s >= p->end || *p->s != '"') return BAIL;
                if ((r = str(p, &o, &n, &h))) return r;
                if (h) return BAIL; /* msgspec checks its UTF-8: let it */
                if (ki == N_INT) { /* "name": a metadata event's label */
                    Py_ssize_t off;
                    if (arena_add(p, o, n, &off)) return NOMEM;
                    e->label_off = off; e->label_len = n;
                }
            }
        }
        if (!done) {
            int li = launch_key_index(k, kn);
            const unsigned char *v0 = p->s;
            if ((r = skip(p, 2))) return r;
            if (li >= 0) {
                uint64_t h = e->launch ? e->launch : FNV_BASIS;
                unsigned char tag = (unsigned char)(li + 1);
                h = fnv(h, &tag, &tag + 1);
                e->launch = fnv(h, v0, p->s);
                if (!e->launch) e->launch = 1; /* 0 means none */
            }
        }
        if ((r = next_member(p, '}')) == 1) { e->aend = p->s - p->base; return 0; }
        if (r) return r;
    }
}

static int kept_str(P *p, int32_t *code) {
    const unsigned char *o; Py_ssize_t n; int hi, r;
    if (p->s >= p->end || *p->s != '"') return BAIL;
    if ((r = str(p, &o, &n, &hi))) return r;
    return intern(p, o, n, code);
}

static int pid_or_tid(P *p, int64_t *v, int *is_str, int64_t *off, int64_t *len) {
    if (p->s >= p->end) return BAIL;
    if (*p->s == '"') {
        const unsigned char *o; Py_ssize_t n; int hi, r;
        Py_ssize_t at;
        if ((r = str(p, &o, &n, &hi))) return r;
        if (hi) return BAIL; /* msgspec checks its UTF-8: let it */
        if (arena_add(p, o, n, &at)) return NOMEM;
        *is_str = 1; *off = at; *len = n; *v = 0;
        return 0;
    }
    *is_str = 0;
    return int64_at(p, v);
}

static int is(P *p, int32_t code, const char *lit) {
    const int64_t *sp = (const int64_t *)p->strs.p + 2 * code;
    size_t n = strlen(lit);
    return (size_t)sp[1] == n && memcmp(p->arena.p + sp[0], lit, n) == 0;
}

static int event(P *p) {
    Ev e;
    memset(&e, 0, sizeof e);
    e.cat = -1;
    e.astart = e.aend = -1;
    for (int i = 0; i < A_KEPT; i++) e.a[i] = -1;
    p->s++;
    ws(p);
    if (p->s < p->end && *p->s == '}') return BAIL; /* no ph: msgspec's lenient path counts it */
    for (;;) {
        const unsigned char *k; Py_ssize_t kn; int hi, r;
        ws(p);
        if (p->s >= p->end || *p->s != '"') return BAIL;
        if ((r = str(p, &k, &kn, &hi))) return r;
        if (k < p->base || k >= p->end || hi) return BAIL;
        ws(p);
        if (p->s >= p->end || *p->s != ':') return BAIL;
        p->s++;
        ws(p);
        r = -3;
        switch (kn) {
        case 2:
            if (k[0] == 'p' && k[1] == 'h') { r = kept_str(p, &e.ph); e.has_ph = 1; }
            else if (k[0] == 't' && k[1] == 's') {
                if (p->s < p->end && (*p->s == '-' || (*p->s >= '0' && *p->s <= '9'))) {
                    int fr, ex;
                    r = number(p, &e.ts0, &fr, &ex);
                    e.ts1 = p->s; e.ts_is_num = 1;
                } else { r = skip(p, 1); e.ts_is_num = 0; }
                e.has_ts = 1;
            }
            break;
        case 3:
            if (memcmp(k, "cat", 3) == 0) r = kept_str(p, &e.cat);
            else if (memcmp(k, "pid", 3) == 0) { r = pid_or_tid(p, &e.pid, &e.pid_str, &e.pid_off, &e.pid_len); e.has_pid = 1; }
            else if (memcmp(k, "tid", 3) == 0) { r = pid_or_tid(p, &e.tid, &e.tid_str, &e.tid_off, &e.tid_len); e.has_tid = 1; }
            else if (memcmp(k, "dur", 3) == 0) {
                if (p->s >= p->end || !(*p->s == '-' || (*p->s >= '0' && *p->s <= '9'))) return BAIL;
                r = double_at(p, &e.dur); e.has_dur = 1;
            }
            break;
        case 4:
            if (memcmp(k, "name", 4) == 0) { r = kept_str(p, &e.name); e.has_name = 1; }
            else if (memcmp(k, "args", 4) == 0) {
                if (p->s >= p->end || *p->s != '{') return BAIL;
                r = args_object(p, &e); e.has_args = 1;
            }
            break;
        }
        if (r == -3) r = skip(p, 1);
        if (r) return r;
        if ((r = next_member(p, '}')) == 1) break;
        if (r) return r;
    }
    if (!(e.has_ph && e.has_name && e.has_pid && e.has_tid && e.has_ts)) return BAIL;
    if (!e.has_args) e.astart = e.aend = -1;
    p->n_elements++;
    if (is(p, e.ph, "X")) {
        int64_t row[X_COLS];
        if (!e.has_dur || !e.ts_is_num || ts_ns(e.ts0, e.ts1, &row[XC_TS])) return BAIL;
        row[XC_NAME] = e.name; row[XC_CAT] = e.cat; row[XC_PID] = e.pid; row[XC_TID] = e.tid;
        memcpy(&row[XC_DUR], &e.dur, 8);
        row[XC_EXT] = e.a[A_EXT]; row[XC_EXTL] = e.a[A_EXTL]; row[XC_CORR] = e.a[A_CORR];
        row[XC_STREAM] = e.a[A_STREAM]; row[XC_DEVICE] = e.a[A_DEVICE]; row[XC_NBYTES] = e.a[A_NBYTES];
        row[XC_ASTART] = e.astart; row[XC_AEND] = e.aend;
        row[XC_LAUNCH] = e.has_args ? (int64_t)e.launch : 0;
        int64_t xrow = p->x.n / (8 * X_COLS);
        if (e.pid_str) { int64_t f[4] = {0, xrow, e.pid_off, e.pid_len}; if (buf_row(&p->fixups, f, 4)) return NOMEM; }
        if (e.tid_str) { int64_t f[4] = {1, xrow, e.tid_off, e.tid_len}; if (buf_row(&p->fixups, f, 4)) return NOMEM; }
        return buf_row(&p->x, row, X_COLS);
    }
    if (is(p, e.ph, "i") && is(p, e.name, "[memory]")) {
        int64_t row[M_COLS];
        if (!e.ts_is_num || ts_ns(e.ts0, e.ts1, &row[MC_TS])) return BAIL;
        row[MC_TID] = e.tid; row[MC_DTYPE] = e.a[A_DTYPE]; row[MC_DID] = e.a[A_DID];
        row[MC_BYTES] = e.a[A_MBYTES]; row[MC_TALLOC] = e.a[A_TALLOC]; row[MC_TRES] = e.a[A_TRES];
        row[MC_ADDR] = e.a[A_ADDR];
        int64_t mrow = p->mem.n / (8 * M_COLS);
        if (e.tid_str) { int64_t f[4] = {2, mrow, e.tid_off, e.tid_len}; if (buf_row(&p->fixups, f, 4)) return NOMEM; }
        return buf_row(&p->mem, row, M_COLS);
    }
    if (is(p, e.ph, "M") && is(p, e.name, "thread_name") && e.label_len > 0 && !e.pid_str && !e.tid_str) {
        int64_t t[4] = {e.pid, e.tid, e.label_off, e.label_len};
        return buf_row(&p->threads, t, 4);
    }
    return 0;
}

static int piece(P *p) {
    ws(p);
    if (p->s >= p->end || *p->s != '[') return BAIL;
    p->s++;
    ws(p);
    if (p->s < p->end && *p->s == ']') { p->s++; }
    else {
        for (;;) {
            ws(p);
            if (p->s >= p->end || *p->s != '{') return BAIL; /* not an object: the lenient path */
            int r = event(p);
            if (r) return r;
            if ((r = next_member(p, ']')) == 1) break;
            if (r) return r;
        }
    }
    ws(p);
    return p->s == p->end ? 0 : BAIL;
}

static void p_free(P *p) {
    free(p->x.p); free(p->mem.p); free(p->arena.p); free(p->strs.p); free(p->threads.p);
    free(p->fixups.p); free(p->scratch.p); free(p->slots);
}

static PyObject *decoded(P *p, int64_t off, int64_t len) {
    return PyUnicode_DecodeUTF8(p->arena.p + off, (Py_ssize_t)len, "strict");
}

/* [(a, b, str)] from rows of four int64 (a, b, offset and length of the string in the arena);
 * NULL with an exception (UnicodeDecodeError: the string is not UTF-8) */
static PyObject *triples(P *p, Buf *rows) {
    Py_ssize_t n = rows->n / 32;
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *r = (const int64_t *)rows->p + 4 * i;
        PyObject *u = decoded(p, r[2], r[3]);
        PyObject *t = u ? Py_BuildValue("(LLN)", (long long)r[0], (long long)r[1], u) : NULL;
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    P p;
    memset(&p, 0, sizeof p);
    p.base = p.s = (const unsigned char *)view.buf;
    p.end = p.s + view.len;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = piece(&p);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL, *strings = NULL, *threads = NULL, *fixups = NULL, *x = NULL, *mem = NULL;
    if (r == NOMEM) { PyErr_NoMemory(); goto done; }
    if (r) { out = Py_None; Py_INCREF(out); goto done; }
    strings = PyList_New(p.nstr);
    if (!strings) goto done;
    for (Py_ssize_t i = 0; i < p.nstr; i++) {
        const int64_t *sp = (const int64_t *)p.strs.p + 2 * i;
        PyObject *u = decoded(&p, sp[0], sp[1]);
        if (!u) goto fail; /* not UTF-8: msgspec says so, and the reader cleans it */
        PyList_SET_ITEM(strings, i, u);
    }
    threads = triples(&p, &p.threads);
    if (!threads) goto fail;
    fixups = triples(&p, &p.fixups);
    if (!fixups) goto fail;
    x = PyBytes_FromStringAndSize(p.x.p ? p.x.p : "", p.x.n);
    mem = x ? PyBytes_FromStringAndSize(p.mem.p ? p.mem.p : "", p.mem.n) : NULL;
    if (!mem) goto done;
    out = Py_BuildValue("(nOOOOO)", p.n_elements, strings, x, mem, threads, fixups);
    goto done;
fail:
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        out = Py_None;
        Py_INCREF(out);
    }
done:
    Py_XDECREF(strings); Py_XDECREF(threads); Py_XDECREF(fixups); Py_XDECREF(x); Py_XDECREF(mem);
    p_free(&p);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(buffer) -> None | (n_elements, strings, x, mem, threads, fixups)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastscan(void) {
    for (int i = 0; i < 64; i++) BY_LEN[i] = -1;
    for (N_INT = 0; INT_KEYS[N_INT]; N_INT++) KEYS[N_INT] = INT_KEYS[N_INT];
    for (N_STR = 0; STR_KEYS[N_STR]; N_STR++) KEYS[N_INT + N_STR] = STR_KEYS[N_STR];
    for (int i = N_INT + N_STR - 1; i >= 0; i--) {
        size_t n = strlen(KEYS[i]);
        NEXT[i] = BY_LEN[n];
        BY_LEN[n] = i;
    }
#if defined(__GLIBC__)
    C_LOCALE = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!C_LOCALE) return PyErr_NoMemory();
#endif
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *keys = Py_BuildValue("(ii)", X_COLS, M_COLS);
    if (!keys || PyModule_AddObject(m, "COLS", keys) < 0) { Py_XDECREF(keys); Py_DECREF(m); return NULL; }
    PyObject *ik = PyTuple_New(N_INT), *sk = PyTuple_New(N_STR);
    if (!ik || !sk) { Py_XDECREF(ik); Py_XDECREF(sk); Py_DECREF(m); return NULL; }
    for (int i = 0; i < N_INT; i++) PyTuple_SET_ITEM(ik, i, PyUnicode_FromString(INT_KEYS[i]));
    for (int i = 0; i < N_STR; i++) PyTuple_SET_ITEM(sk, i, PyUnicode_FromString(STR_KEYS[i]));
    if (PyModule_AddObject(m, "INT_KEYS", ik) < 0 || PyModule_AddObject(m, "STR_KEYS", sk) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
