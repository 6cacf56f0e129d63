/* The time model's grid-order dispatch, compiled: a twin of the pure-Python reference, same arithmetic, same result.
 *
 * What it computes, for many launches at once: the busy time of a ragged kernel of more than one wave whose grid the
 * block scheduler dispatches in order (vLLM's and SGLang's Triton kernels), from each launch's per-sequence cells.
 * The Python it mirrors, statement by statement (floating-point operations in the same order, so the results are
 * bit-identical; tests/test_dispatch.py checks that on thousands of launches):
 *
 *   decodecalc/timemodel/work.py     planes_order, add_block        the grid order from the cells
 *   decodecalc/timemodel/predict.py  kernel_time_s (ordered, more than one wave, ragged): t_start + t0 + tail,
 *                                    _grid_order_schedule, _row_parts, _shared_tail_s, IterationCost.t_it
 *
 * The rules live there; decodecalc/batch/dispatch.py chooses this module when it was built and the reference
 * otherwise. A launch's cells are (a, full, last, q) per sequence in batch order: its programs run ``full`` loop
 * iterations in the planes z < a - 1, ``last`` in plane a - 1 and exit at once past it; ``q`` programs per sequence
 * and plane along x, the row repeated ``repeats`` times (y), ``planes`` planes (z).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ growable arrays */

typedef struct { double i; int64_t k; } Run;   /* a run of k programs of i loop iterations */

typedef struct { Run *v; Py_ssize_t n, cap; } Runs;

static int runs_push(Runs *r, double i, int64_t k) {
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 64;
        Run *v = realloc(r->v, (size_t)cap * sizeof(Run));
        if (!v) return -1;
        r->v = v; r->cap = cap;
    }
    r->v[r->n].i = i; r->v[r->n].k = k; r->n++;
    return 0;
}

/* a block of the order: runs [start, start + len) of the run store, repeated rep times */
typedef struct { Py_ssize_t start, len; int64_t rep; } Block;

typedef struct { Block *v; Py_ssize_t n, cap; } Blocks;

static int blocks_push(Blocks *b, Py_ssize_t start, Py_ssize_t len, int64_t rep) {
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 32;
        Block *v = realloc(b->v, (size_t)cap * sizeof(Block));
        if (!v) return -1;
        b->v = v; b->cap = cap;
    }
    b->v[b->n].start = start; b->v[b->n].len = len; b->v[b->n].rep = rep; b->n++;
    return 0;
}

/* ------------------------------------------------------------------------------------------ the grid order */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* add_block: append row (the last ``len`` runs of the store, from ``start``) repeated ``rep`` times, merging as
 * work.add_block does; the store keeps only what the blocks use */
static int add_block(Runs *store, Blocks *blocks, Py_ssize_t start, Py_ssize_t len, int64_t rep) {
    if (len == 0 || rep <= 0) { store->n = start; return 0; }
    if (len == 1 && rep > 1) { store->v[start].k *= rep; rep = 1; }
    if (blocks->n) {
        Block *p = &blocks->v[blocks->n - 1];
        int same = p->len == len;
        for (Py_ssize_t j = 0; same && j < len; j++)
            same = store->v[p->start + j].i == store->v[start + j].i && store->v[p->start + j].k == store->v[start + j].k;
        if (same) { p->rep += rep; store->n = start; return 0; }
        if (len == 1 && p->len == 1 && p->rep == 1 && store->v[p->start].i == store->v[start].i) {
            store->v[p->start].k += store->v[start].k;
            store->n = start;
            return 0;
        }
    }
    return blocks_push(blocks, start, len, rep);
}

/* planes_order: the cells (a, full, last, q) of n sequences -> blocks of rows of runs */
static int planes_order(const int64_t *a, const int64_t *full, const int64_t *last, const int64_t *q, Py_ssize_t n,
                        int64_t planes, int64_t repeats, Runs *store, Blocks *blocks, int64_t *scratch) {
    /* neighbours with equal cells merged (programs summed) into the live cells; every cell's a makes cuts */
    Py_ssize_t m = 0, live = 0;
    int64_t *la = scratch, *lf = scratch + n, *ll = scratch + 2 * n, *lk = scratch + 3 * n, *cuts = scratch + 4 * n;
    int64_t pa = 0, pf = 0, pl = 0, pq = 0;
    int have_prev = 0;
    Py_ssize_t nc = 0;
    cuts[nc++] = 0;
    cuts[nc++] = planes;
    for (Py_ssize_t x = 0; x < n; x++) {
        if (have_prev && a[x] == pa && full[x] == pf && last[x] == pl && q[x] == pq) {
            lk[m - 1] += q[x];
            continue;
        }
        have_prev = 1; pa = a[x]; pf = full[x]; pl = last[x]; pq = q[x];
        la[m] = a[x]; lf[m] = full[x]; ll[m] = last[x]; lk[m] = q[x]; m++;
        if (a[x] - 1 > 0 && a[x] - 1 < planes) cuts[nc++] = a[x] - 1;
        if (a[x] > 0 && a[x] < planes) cuts[nc++] = a[x];
    }
    for (Py_ssize_t j = 0; j < m; j++)   /* cells without programs dropped (their a still cuts) */
        if (lk[j] > 0) { la[live] = la[j]; lf[live] = lf[j]; ll[live] = ll[j]; lk[live] = lk[j]; live++; }
    qsort(cuts, (size_t)nc, sizeof(int64_t), cmp_i64);
    Py_ssize_t u = 0;
    for (Py_ssize_t j = 0; j < nc; j++)
        if (u == 0 || cuts[j] != cuts[u - 1]) cuts[u++] = cuts[j];
    for (Py_ssize_t c = 0; c + 1 < u; c++) {
        int64_t z0 = cuts[c], z1 = cuts[c + 1];
        Py_ssize_t start = store->n;
        for (Py_ssize_t j = 0; j < live; j++) {
            if (z0 >= la[j]) continue;
            int64_t i = z0 < la[j] - 1 ? lf[j] : ll[j];
            if (store->n > start && store->v[store->n - 1].i == (double)i) store->v[store->n - 1].k += lk[j];
            else if (runs_push(store, (double)i, lk[j])) return -1;
        }
        if (add_block(store, blocks, start, store->n - start, repeats * (z1 - z0))) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ the slots' loads */

/* slots with equal loads: one group, as the reference's dict load -> [slots, iterations of their last program];
 * groups are kept in insertion order (the dict's), a hash of the load's bits finds them, a min-heap of loads */
typedef struct {
    double *key, *last;
    int64_t *count;
    char *alive;
    Py_ssize_t n, cap;            /* groups ever inserted since the last rebuild (insertion order) */
    Py_ssize_t *table;            /* open addressing: group index + 1, 0 empty, -1 deleted */
    Py_ssize_t tsize, tused;
    double *heap;
    Py_ssize_t hn, hcap;
} Loads;

static uint64_t hash_key(double x) {
    uint64_t h;
    memcpy(&h, &x, sizeof h);
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ULL; h ^= h >> 33;
    return h;
}

static Py_ssize_t loads_find(const Loads *L, double key) {   /* group index, or -1 */
    Py_ssize_t mask = L->tsize - 1, p = (Py_ssize_t)(hash_key(key) & (uint64_t)mask);
    for (;;) {
        Py_ssize_t e = L->table[p];
        if (e == 0) return -1;
        if (e > 0 && L->alive[e - 1] && L->key[e - 1] == key) return e - 1;
        p = (p + 1) & mask;
    }
}

static int loads_rehash(Loads *L, Py_ssize_t size) {
    Py_ssize_t *t = calloc((size_t)size, sizeof(Py_ssize_t));
    if (!t) return -1;
    free(L->table);
    L->table = t; L->tsize = size; L->tused = 0;
    for (Py_ssize_t g = 0; g < L->n; g++) {
        if (!L->alive[g]) continue;
        Py_ssize_t p = (Py_ssize_t)(hash_key(L->key[g]) & (uint64_t)(size - 1));
        while (t[p]) p = (p + 1) & (size - 1);
        t[p] = g + 1;
        L->tused++;
    }
    return 0;
}

static int loads_compact(Loads *L) {   /* drop dead groups, keeping the insertion order */
    Py_ssize_t w = 0;
    for (Py_ssize_t g = 0; g < L->n; g++) {
        if (!L->alive[g]) continue;
        L->key[w] = L->key[g]; L->last[w] = L->last[g]; L->count[w] = L->count[g]; L->alive[w] = 1; w++;
    }
    L->n = w;
    return loads_rehash(L, L->tsize);
}

static int loads_insert(Loads *L, double key, int64_t count, double last) {   /* a new key, at the end */
    if (L->n == L->cap) {
        Py_ssize_t alive = 0;
        for (Py_ssize_t g = 0; g < L->n; g++) alive += L->alive[g];
        if (alive * 2 < L->n) {
            if (loads_compact(L)) return -1;
        } else {
            Py_ssize_t cap = 2 * L->cap;
            double *k = realloc(L->key, (size_t)cap * sizeof(double));
            if (!k) return -1;
            L->key = k;
            double *l = realloc(L->last, (size_t)cap * sizeof(double));
            if (!l) return -1;
            L->last = l;
            int64_t *c = realloc(L->count, (size_t)cap * sizeof(int64_t));
            if (!c) return -1;
            L->count = c;
            char *a = realloc(L->alive, (size_t)cap);
            if (!a) return -1;
            L->alive = a;
            L->cap = cap;
        }
    }
    if (2 * (L->tused + 1) > L->tsize) {   /* grow, unless deleted entries are what fills the table */
        Py_ssize_t alive = 0;
        for (Py_ssize_t j = 0; j < L->n; j++) alive += L->alive[j];
        if (loads_rehash(L, 4 * (alive + 1) <= L->tsize ? L->tsize : 2 * L->tsize)) return -1;
    }
    Py_ssize_t g = L->n++;
    L->key[g] = key; L->count[g] = count; L->last[g] = last; L->alive[g] = 1;
    Py_ssize_t mask = L->tsize - 1, p = (Py_ssize_t)(hash_key(key) & (uint64_t)mask);
    while (L->table[p] > 0) p = (p + 1) & mask;
    if (L->table[p] == 0) L->tused++;
    L->table[p] = g + 1;
    return 0;
}

static void loads_delete(Loads *L, Py_ssize_t g) {
    Py_ssize_t mask = L->tsize - 1, p = (Py_ssize_t)(hash_key(L->key[g]) & (uint64_t)mask);
    while (L->table[p] != g + 1) p = (p + 1) & mask;
    L->table[p] = -1;
    L->alive[g] = 0;
}

static int heap_push(Loads *L, double x) {
    if (L->hn == L->hcap) {
        Py_ssize_t cap = 2 * L->hcap;
        double *h = realloc(L->heap, (size_t)cap * sizeof(double));
        if (!h) return -1;
        L->heap = h; L->hcap = cap;
    }
    Py_ssize_t j = L->hn++;
    while (j > 0) {
        Py_ssize_t p = (j - 1) / 2;
        if (L->heap[p] <= x) break;
        L->heap[j] = L->heap[p];
        j = p;
    }
    L->heap[j] = x;
    return 0;
}

static void heap_pop(Loads *L) {
    double x = L->heap[--L->hn];
    Py_ssize_t j = 0, n = L->hn;
    for (;;) {
        Py_ssize_t c = 2 * j + 1;
        if (c >= n) break;
        if (c + 1 < n && L->heap[c + 1] < L->heap[c]) c++;
        if (L->heap[c] >= x) break;
        L->heap[j] = L->heap[c];
        j = c;
    }
    if (n) L->heap[j] = x;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int loads_reset(Loads *L, int64_t slots) {
    L->n = 0;
    memset(L->table, 0, (size_t)L->tsize * sizeof(Py_ssize_t));
    L->tused = 0;
    L->hn = 0;
    if (loads_insert(L, 0.0, slots, 0.0)) return -1;
    return heap_push(L, 0.0);
}

static int loads_init(Loads *L) {
    memset(L, 0, sizeof *L);
    L->cap = 64; L->tsize = 256; L->hcap = 64;
    L->key = malloc(64 * sizeof(double)); L->last = malloc(64 * sizeof(double));
    L->count = malloc(64 * sizeof(int64_t)); L->alive = malloc(64);
    L->table = calloc(256, sizeof(Py_ssize_t)); L->heap = malloc(64 * sizeof(double));
    return (L->key && L->last && L->count && L->alive && L->table && L->heap) ? 0 : -1;
}

static void loads_free(Loads *L) {
    free(L->key); free(L->last); free(L->count); free(L->alive); free(L->table); free(L->heap);
}

/* ------------------------------------------------------------------------------------------ the schedule */

typedef struct {
    double t0, ti;
    int64_t slots, fast;
    double start;
} Sched;

/* _grid_order_schedule's place(i, k) */
static int place(Loads *L, Sched *S, double i, int64_t k) {
    double dur = S->t0 + i * S->ti;
    double low = 0.0;
    while (k) {
        if (k >= S->fast) {
            double top = -INFINITY;
            for (Py_ssize_t g = 0; g < L->n; g++)
                if (L->alive[g] && L->key[g] > top) top = L->key[g];
            if (top - L->heap[0] < dur) {
                /* whole rounds: every load shifted, every group's last program i (a dict comprehension: a load
                 * that collides with an earlier one after the shift replaces its value in place) */
                int64_t rounds = k / S->slots;
                double shift = (double)rounds * dur;
                Py_ssize_t n = L->n, w = 0;
                double *nk = malloc((size_t)(n ? n : 1) * sizeof(double));
                int64_t *nc = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
                if (!nk || !nc) { free(nk); free(nc); return -1; }
                for (Py_ssize_t g = 0; g < n; g++) {
                    if (!L->alive[g]) continue;
                    double key = L->key[g] + shift;
                    Py_ssize_t j;
                    for (j = 0; j < w; j++) if (nk[j] == key) break;
                    if (j < w) nc[j] = L->count[g];
                    else { nk[w] = key; nc[w] = L->count[g]; w++; }
                }
                L->n = 0;
                memset(L->table, 0, (size_t)L->tsize * sizeof(Py_ssize_t));
                L->tused = 0;
                L->hn = 0;
                for (Py_ssize_t j = 0; j < w; j++)
                    if (loads_insert(L, nk[j], nc[j], i)) { free(nk); free(nc); return -1; }
                qsort(nk, (size_t)w, sizeof(double), cmp_double);   /* a sorted list is a heap */
                for (Py_ssize_t j = 0; j < w; j++)
                    if (heap_push(L, nk[j])) { free(nk); free(nc); return -1; }
                free(nk); free(nc);
                low = top + shift - dur;
                k -= rounds * S->slots;
                continue;
            }
        }
        low = L->heap[0];
        Py_ssize_t g = loads_find(L, low);
        int64_t have = L->count[g], take;
        if (have <= k) {
            take = have;
            heap_pop(L);
            loads_delete(L, g);
        } else {
            take = k;
            L->count[g] = have - k;
        }
        double nw = low + dur;
        Py_ssize_t h = loads_find(L, nw);
        if (h < 0) {
            if (loads_insert(L, nw, take, i) || heap_push(L, nw)) return -1;
        } else {
            L->count[h] += take;
            if (i > L->last[h]) L->last[h] = i;
        }
        k -= take;
    }
    S->start = low;
    return 0;
}

static int cmp_run_desc(const void *a, const void *b) {   /* sorted(row, reverse=True): by (i, k) descending */
    const Run *x = a, *y = b;
    if (x->i != y->i) return x->i < y->i ? 1 : -1;
    return (x->k < y->k) - (x->k > y->k);
}

static int cmp_run_asc(const void *a, const void *b) {    /* sorted(running): by (i, k) ascending */
    const Run *x = a, *y = b;
    if (x->i != y->i) return x->i < y->i ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

typedef struct {   /* IterationCost.t_it's scalar path */
    double latency, saturated, bytes, sm_bw, hbm_bytes, hbm_bw, power;
    int64_t occ, num_sms;
} Iter;

static double t_it(const Iter *c, int64_t cc, int64_t conc) {
    double m = (double)cc < c->saturated ? (double)cc : c->saturated;   /* min(c, saturated) */
    double sm = c->latency + m * c->bytes / c->sm_bw;
    double hbm = (double)conc * c->hbm_bytes / c->hbm_bw;
    if (c->power != 0.0) return pow(pow(sm, c->power) + pow(hbm, c->power), 1.0 / c->power);
    return sm >= hbm ? sm : hbm;
}

/* the busy time of one launch: t_start + t0 + _shared_tail_s(running) */
static int busy_one(const int64_t *a, const int64_t *full, const int64_t *last, const int64_t *q, Py_ssize_t n,
                    int64_t planes, int64_t repeats, const Iter *c, double t0, double ti, int64_t slots,
                    int64_t max_exact_runs, int64_t tail_waves, int64_t fast_rounds, int64_t row_parts,
                    Runs *store, Blocks *blocks, Loads *L, int64_t *scratch, Runs *parts, double *out) {
    store->n = 0; blocks->n = 0;
    if (planes_order(a, full, last, q, n, planes, repeats, store, blocks, scratch)) return -1;
    int64_t runs = 0, total = 0;
    for (Py_ssize_t b = 0; b < blocks->n; b++) {
        int64_t progs = 0;
        for (Py_ssize_t j = 0; j < blocks->v[b].len; j++) progs += store->v[blocks->v[b].start + j].k;
        runs += blocks->v[b].len * blocks->v[b].rep;
        total += progs * blocks->v[b].rep;
    }
    if (loads_reset(L, slots)) return -1;
    Sched S = {t0, ti, slots, fast_rounds * slots, 0.0};
    if (runs <= max_exact_runs) {
        for (Py_ssize_t b = 0; b < blocks->n; b++)
            for (int64_t r = 0; r < blocks->v[b].rep; r++)
                for (Py_ssize_t j = 0; j < blocks->v[b].len; j++) {
                    Run *x = &store->v[blocks->v[b].start + j];
                    if (place(L, &S, x->i, x->k)) return -1;
                }
    } else {
        int64_t left = total - tail_waves * slots;
        for (Py_ssize_t b = 0; b < blocks->n; b++) {
            const Block *B = &blocks->v[b];
            Run *row = &store->v[B->start];
            int64_t progs = 0;
            for (Py_ssize_t j = 0; j < B->len; j++) progs += row[j].k;
            int64_t early = (B->len == 1 || left >= progs * B->rep) ? B->rep : B->rep - 1;
            left -= progs * B->rep;
            if (early) {
                /* _row_parts: the row's programs by length, longest first, in row_parts parts of equal counts */
                parts->n = 0;
                if (B->len == 1) {
                    if (runs_push(parts, row[0].i, row[0].k)) return -1;
                } else {
                    Run *sorted = malloc((size_t)B->len * sizeof(Run));
                    if (!sorted) return -1;
                    memcpy(sorted, row, (size_t)B->len * sizeof(Run));
                    qsort(sorted, (size_t)B->len, sizeof(Run), cmp_run_desc);
                    int64_t size = (progs + row_parts - 1) / row_parts, n_p = 0, it_p = 0;   /* cdiv */
                    for (Py_ssize_t j = 0; j < B->len; j++) {
                        int64_t k = sorted[j].k, i = (int64_t)sorted[j].i;
                        while (k) {
                            int64_t take = k < size - n_p ? k : size - n_p;
                            n_p += take; it_p += i * take; k -= take;
                            if (n_p == size) {
                                if (runs_push(parts, (double)it_p / (double)n_p, n_p)) { free(sorted); return -1; }
                                n_p = 0; it_p = 0;
                            }
                        }
                    }
                    if (n_p && runs_push(parts, (double)it_p / (double)n_p, n_p)) { free(sorted); return -1; }
                    free(sorted);
                }
                for (Py_ssize_t j = 0; j < parts->n; j++)
                    if (place(L, &S, parts->v[j].i, parts->v[j].k * early)) return -1;
            }
            if (early < B->rep)
                for (Py_ssize_t j = 0; j < B->len; j++)
                    if (place(L, &S, row[j].i, row[j].k)) return -1;
        }
    }
    /* running = [(min(last, (load - start) / ti), slots) for load > start]; then the shared tail */
    double start = S.start;
    parts->n = 0;
    int64_t m = 0;
    for (Py_ssize_t g = 0; g < L->n; g++) {
        if (!L->alive[g] || !(L->key[g] > start)) continue;
        double rem = (L->key[g] - start) / ti;
        if (runs_push(parts, L->last[g] <= rem ? L->last[g] : rem, L->count[g])) return -1;
        m += L->count[g];
    }
    qsort(parts->v, (size_t)parts->n, sizeof(Run), cmp_run_asc);
    double t = 0.0, done = 0.0;
    for (Py_ssize_t j = 0; j < parts->n; j++) {
        double i = parts->v[j].i;
        if (i > done) {
            int64_t per = (m + c->num_sms - 1) / c->num_sms;   /* cdiv(m, num_sms), m >= 0 */
            t += (i - done) * t_it(c, c->occ < per ? c->occ : per, m);
            done = i;
        }
        m -= parts->v[j].k;
    }
    *out = start + t0 + t;
    return 0;
}

/* ------------------------------------------------------------------------------------------ the Python entry */

static int get_buf(PyObject *o, Py_buffer *v, int writable, const char *fmt, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (v->itemsize != itemsize || (v->format && strcmp(v->format, fmt) != 0 &&
                                    !(itemsize == 8 && fmt[0] == 'q' && strcmp(v->format, "l") == 0))) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous buffer of format '%s'", name, fmt);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(busy_doc,
"busy_s(a, full, last, q, offsets, planes, repeats, iter_params, t0, ti, slots, limits, out)\n\n"
"The busy time of launch r (cells offsets[r]:offsets[r + 1] of the int64 arrays a, full, last, q) written to\n"
"out[r] (float64): decodecalc.batch.dispatch.busy_s's contract.");

static PyObject *busy_s(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[6];
    long long planes, repeats, slots, occ, num_sms, max_exact_runs, tail_waves, fast_rounds, row_parts;
    double latency, saturated, bytes, sm_bw, hbm_bytes, hbm_bw, power, t0, ti;
    if (!PyArg_ParseTuple(args, "OOOOOLL(dddddddLL)ddL(LLLL)O", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &planes, &repeats, &latency, &saturated, &bytes, &sm_bw, &hbm_bytes, &hbm_bw, &power, &occ,
                          &num_sms, &t0, &ti, &slots, &max_exact_runs, &tail_waves, &fast_rounds, &row_parts, &objs[5]))
        return NULL;
    static const char *names[6] = {"a", "full", "last", "q", "offsets", "out"};
    Py_buffer bufs[6];
    int got = 0, ok = 0;
    for (; got < 6; got++)
        if (get_buf(objs[got], &bufs[got], got == 5, got == 5 ? "d" : "q", 8, names[got])) break;
    if (got == 6) {
        Py_ssize_t cells = bufs[0].len / 8, nrows = bufs[4].len / 8 - 1;
        const int64_t *a = bufs[0].buf, *full = bufs[1].buf, *last = bufs[2].buf, *q = bufs[3].buf,
                      *off = bufs[4].buf;
        double *out = bufs[5].buf;
        ok = bufs[1].len == bufs[0].len && bufs[2].len == bufs[0].len && bufs[3].len == bufs[0].len && nrows >= 0 &&
             bufs[5].len / 8 == nrows && slots > 0 && num_sms > 0 && row_parts > 0;
        Py_ssize_t widest = 1;
        for (Py_ssize_t r = 0; ok && r < nrows; r++) {
            ok = off[r] >= 0 && off[r + 1] >= off[r] && off[r + 1] <= cells;
            if (ok && off[r + 1] - off[r] > widest) widest = off[r + 1] - off[r];
        }
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "busy_s: inconsistent array lengths, offsets or constants");
        } else {
            Iter c = {latency, saturated, bytes, sm_bw, hbm_bytes, hbm_bw, power, occ, num_sms};
            Runs store = {0}, parts = {0};
            Blocks blocks = {0};
            Loads L;
            int64_t *scratch = malloc((size_t)(6 * widest + 2) * sizeof(int64_t));
            int bad = scratch == NULL || loads_init(&L);
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t r = 0; r < nrows && !bad; r++)
                bad = busy_one(a + off[r], full + off[r], last + off[r], q + off[r], off[r + 1] - off[r], planes,
                               repeats, &c, t0, ti, slots, max_exact_runs, tail_waves, fast_rounds, row_parts, &store,
                               &blocks, &L, scratch, &parts, out + r);
            Py_END_ALLOW_THREADS
            if (scratch) loads_free(&L);
            free(scratch); free(store.v); free(parts.v); free(blocks.v);
            if (bad) { PyErr_NoMemory(); ok = 0; }
        }
    }
    for (int j = 0; j < got; j++) PyBuffer_Release(&bufs[j]);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"busy_s", busy_s, METH_VARARGS, busy_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dispatch",
    "The time model's grid-order dispatch, compiled (decodecalc/batch/dispatch.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__dispatch(void) { return PyModule_Create(&module); }
