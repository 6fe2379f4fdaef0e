/* symmem.accounting._callocator: `CachingAllocator.run` of symmem/accounting/allocator.py in C, the same rules
 * (PyTorch's c10/cuda/CUDACachingAllocator.cpp with default settings: round_size, the two pools, best fit by
 * (size, address), get_allocation_size, should_split, try_merge_blocks), for the allocator replays of Megatron's
 * steps, which make millions of calls (issue 45: a sweep's reserved column replays every listed row).
 *
 * The Python class is the reference; tests/test_callocator.py holds this one equal to it, state figure by state
 * figure, on random sequences and on whole replays. Sizes arrive rounded (`allocator.request`), as `run` takes them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MIN_BLOCK 512LL
#define SMALL_SIZE (1LL << 20)
#define SMALL_BUFFER (2LL << 20)
#define LARGE_BUFFER (20LL << 20)
#define MIN_LARGE_ALLOC (10LL << 20)
#define ROUND_LARGE (2LL << 20)
#define SLOT_LIMIT (1L << 22)

static PyObject *SymmemError = NULL;

typedef struct {
    long long address, size;
    int prev, next; /* block indices in the same segment, -1 at its ends */
    char small, allocated;
} Block;

typedef struct {
    long long size;
    int *idx; /* its free blocks, by address from the highest: the best fit, the lowest, is the last */
    Py_ssize_t len, cap;
} Run; /* the free blocks of one size */

typedef struct {
    Run *runs; /* by size: the free blocks in (size, address) order, run after run */
    Py_ssize_t len, cap;
    Run *spare; /* runs emptied, their arrays kept for reuse */
    Py_ssize_t nspare, spare_cap;
} Pool;
/* Why runs: on a sweep's replays a pool holds about 75 free blocks of about 12 sizes (the same activations over
 * and over), so a best fit is a search over a dozen sizes and the first of a run, with no search over the blocks
 * (a binary search over all of them, one block lookup per step, was most of the replay's time) */

typedef struct {
    PyObject_HEAD
    Block *blocks;
    Py_ssize_t nblocks, cap;
    int *spare; /* indices of blocks merged away, for reuse */
    Py_ssize_t nspare, spare_cap;
    Pool pools[2]; /* [0] large, [1] small */
    PyObject *live; /* key -> block index (int), for keys other than small non-negative ints */
    int *slot; /* small int key -> block index + 1 (0: not live): the replays' storage ids, without a dict */
    Py_ssize_t slot_cap, slot_used, nslot_live;
    int last; /* the block the last malloc handed out */
    long long allocated, reserved, peak_allocated, peak_reserved, segments, top;
} Alloc;

static int grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = PyMem_Realloc(*p, (size_t)n * item);
    if (!q) { PyErr_NoMemory(); return -1; }
    *p = q;
    *cap = n;
    return 0;
}

static int new_block(Alloc *a, long long address, long long size, char small, int prev, int next) {
    int i;
    if (a->nspare) {
        i = a->spare[--a->nspare];
    } else {
        if (grow((void **)&a->blocks, &a->cap, a->nblocks + 1, sizeof(Block)) < 0) return -1;
        i = (int)a->nblocks++;
    }
    Block *b = &a->blocks[i];
    b->address = address; b->size = size; b->small = small; b->allocated = 0; b->prev = prev; b->next = next;
    return i;
}

/* the first run whose size is not below `size`: from the front over a few runs (a dozen on the sweep's replays,
 * where a binary search's unpredictable branches cost more), halving over many */
static Py_ssize_t run_at(const Pool *p, long long size) {
    const Run *r = p->runs;
    Py_ssize_t lo = 0, hi = p->len;
    while (hi - lo > 32) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (r[mid].size < size) lo = mid + 1; else hi = mid;
    }
    while (lo < hi && r[lo].size < size) lo++;
    return lo;
}

/* a new, empty run of `size` at position `at`. The spare list is grown first to hold every run there is, so that
 * closing one never allocates: a failed allocation leaves the pools as they were */
static Run *open_run(Pool *p, Py_ssize_t at, long long size) {
    if (grow((void **)&p->spare, &p->spare_cap, p->len + p->nspare + 1, sizeof(Run)) < 0) return NULL;
    if (grow((void **)&p->runs, &p->cap, p->len + 1, sizeof(Run)) < 0) return NULL;
    memmove(p->runs + at + 1, p->runs + at, (size_t)(p->len - at) * sizeof(Run));
    p->len++;
    Run *r = &p->runs[at];
    if (p->nspare) {
        *r = p->spare[--p->nspare];
    } else {
        r->idx = NULL;
        r->cap = 0;
    }
    r->size = size;
    r->len = 0;
    return r;
}

/* run `at`, now empty, out of the pool (its array kept for the next run opened; the spare list has room:
 * `open_run`) */
static int close_run(Pool *p, Py_ssize_t at) {
    p->spare[p->nspare++] = p->runs[at];
    memmove(p->runs + at, p->runs + at + 1, (size_t)(p->len - at - 1) * sizeof(Run));
    p->len--;
    return 0;
}

static int pool_insert(Alloc *a, Pool *p, int i) {
    long long size = a->blocks[i].size, address = a->blocks[i].address;
    Py_ssize_t at = run_at(p, size);
    Run *r = at < p->len && p->runs[at].size == size ? &p->runs[at] : open_run(p, at, size);
    if (!r) return -1;
    if (grow((void **)&r->idx, &r->cap, r->len + 1, sizeof(int)) < 0) {
        if (r->len == 0) close_run(p, at); /* (the run just opened: the pool as it was) */
        return -1;
    }
    Py_ssize_t j = r->len; /* by address: from the end (a run holds a few blocks) */
    while (j > 0 && a->blocks[r->idx[j - 1]].address < address) {
        r->idx[j] = r->idx[j - 1]; /* (moved up as it goes: a run's few entries, no memmove call) */
        j--;
    }
    r->idx[j] = i;
    r->len++;
    return 0;
}

/* take the block at position `j` of run `at` out of the pool */
static int take(Pool *p, Py_ssize_t at, Py_ssize_t j) {
    Run *r = &p->runs[at];
    for (Py_ssize_t k = j + 1; k < r->len; k++) r->idx[k - 1] = r->idx[k];
    r->len--;
    return r->len ? 0 : close_run(p, at);
}

static int pool_remove(Alloc *a, Pool *p, int i) {
    Py_ssize_t at = run_at(p, a->blocks[i].size);
    if (at < p->len && p->runs[at].size == a->blocks[i].size) {
        Run *r = &p->runs[at];
        for (Py_ssize_t j = 0; j < r->len; j++)
            if (r->idx[j] == i) return take(p, at, j);
    }
    PyErr_SetString(PyExc_AssertionError, "a free block missing from its pool");
    return -1;
}

static long long allocation_size(long long size) {
    if (size <= SMALL_SIZE) return SMALL_BUFFER;
    if (size < MIN_LARGE_ALLOC) return LARGE_BUFFER;
    return (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

static int do_malloc(Alloc *a, PyObject *key, long long size) {
    int small = size <= SMALL_SIZE;
    Pool *pool = &a->pools[small];
    Py_ssize_t at = run_at(pool, size);
    int i;
    if (at < pool->len) { /* the best fit: the smallest size that serves, its lowest address */
        i = pool->runs[at].idx[pool->runs[at].len - 1];
        if (take(pool, at, pool->runs[at].len - 1) < 0) return -1;
    } else { /* a new segment after the last */
        long long seg = allocation_size(size);
        i = new_block(a, a->top, seg, (char)small, -1, -1);
        if (i < 0) return -1;
        a->top += seg;
        a->reserved += seg;
        a->segments++;
        if (a->reserved > a->peak_reserved) a->peak_reserved = a->reserved;
    }
    long long remaining = a->blocks[i].size - size;
    if (small ? remaining >= MIN_BLOCK : remaining > SMALL_SIZE) {
        int after = a->blocks[i].next;
        int rest = new_block(a, a->blocks[i].address + size, remaining, (char)small, i, after);
        if (rest < 0) return -1;
        if (after >= 0) a->blocks[after].prev = rest;
        a->blocks[i].next = rest;
        a->blocks[i].size = size;
        if (pool_insert(a, pool, rest) < 0) return -1;
    }
    a->blocks[i].allocated = 1;
    a->last = i;
    if (key != NULL) {
        PyObject *v = PyLong_FromLong(i);
        if (!v) return -1;
        int r = PyDict_SetItem(a->live, key, v);
        Py_DECREF(v);
        if (r < 0) return -1;
    }
    a->allocated += a->blocks[i].size;
    if (a->allocated > a->peak_allocated) a->peak_allocated = a->allocated;
    return 0;
}

static int spare(Alloc *a, int i) {
    if (grow((void **)&a->spare, &a->spare_cap, a->nspare + 1, sizeof(int)) < 0) return -1;
    a->spare[a->nspare++] = i;
    return 0;
}

static int do_free(Alloc *a, int i) {
    Block *b = &a->blocks[i];
    Pool *pool = &a->pools[(int)b->small];
    b->allocated = 0;
    a->allocated -= b->size;
    int before = b->prev;
    if (before >= 0 && !a->blocks[before].allocated) { /* try_merge_blocks with the free block before */
        if (pool_remove(a, pool, before) < 0) return -1;
        b = &a->blocks[i];
        b->address = a->blocks[before].address;
        b->size += a->blocks[before].size;
        b->prev = a->blocks[before].prev;
        if (b->prev >= 0) a->blocks[b->prev].next = i;
        if (spare(a, before) < 0) return -1;
    }
    b = &a->blocks[i];
    int after = b->next;
    if (after >= 0 && !a->blocks[after].allocated) { /* and the one after */
        if (pool_remove(a, pool, after) < 0) return -1;
        b = &a->blocks[i];
        b->size += a->blocks[after].size;
        b->next = a->blocks[after].next;
        if (b->next >= 0) a->blocks[b->next].prev = i;
        if (spare(a, after) < 0) return -1;
    }
    return pool_insert(a, pool, i);
}

/* one op on a small integer key (a storage id, already moved on): allocate `size` bytes, or free when 0 */
static int slot_op(Alloc *a, long key, long long size) {
    if (grow((void **)&a->slot, &a->slot_cap, key + 1, sizeof(int)) < 0) return -1;
    for (Py_ssize_t j = a->slot_used; j < a->slot_cap; j++) a->slot[j] = 0;
    if (a->slot_cap > a->slot_used) a->slot_used = a->slot_cap;
    int at = a->slot[key];
    if (size) {
        if (at) {
            PyErr_Format(SymmemError, "allocation %ld: allocated twice without a free", key);
            return -1;
        }
        if (do_malloc(a, NULL, size) < 0) return -1;
        a->slot[key] = a->last + 1;
        a->nslot_live++;
        return 0;
    }
    if (!at) {
        PyErr_Format(SymmemError, "allocation %ld: freed but not allocated", key);
        return -1;
    }
    a->slot[key] = 0;
    a->nslot_live--;
    return do_free(a, at - 1) < 0 ? -1 : 0;
}

/* `run` over a buffer of int64 (key, size) pairs (`allocator.pack`): the same ops without a Python object each;
 * every key a storage id, moved on by `by` */
static PyObject *Alloc_run_packed(Alloc *a, PyObject *args) {
    PyObject *obj;
    long by = 0;
    if (!PyArg_ParseTuple(args, "O|l", &obj, &by)) return NULL;
    if (by < 0 || by >= SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "run_packed: `by` beyond the storage ids' range");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (view.itemsize != 8 || view.format == NULL || (strcmp(view.format, "q") && strcmp(view.format, "l")
            && strcmp(view.format, "=q") && strcmp(view.format, "<q")) || view.len % 16) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "packed ops are int64 (key, size) pairs (allocator.pack)");
        return NULL;
    }
    const long long *op = (const long long *)view.buf;
    Py_ssize_t n = view.len / (Py_ssize_t)sizeof(long long);
    for (Py_ssize_t j = 0; j < n; j += 2) {
        /* (the key moved on by `by` stays below SLOT_LIMIT: checked without overflow) */
        if (op[j] < 0 || op[j] >= SLOT_LIMIT - by || op[j + 1] < 0) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "a packed op's key beyond the storage ids' range, or a negative size");
            return NULL;
        }
        if (slot_op(a, (long)(op[j] + by), op[j + 1]) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *Alloc_run(Alloc *a, PyObject *args) {
    PyObject *ops;
    long by = 0;
    if (!PyArg_ParseTuple(args, "O|l", &ops, &by)) return NULL;
    PyObject *it = PyObject_GetIter(ops);
    if (!it) return NULL;
    PyObject *op;
    while ((op = PyIter_Next(it))) {
        PyObject *key, *sz;
        if (!PyTuple_Check(op) || PyTuple_GET_SIZE(op) != 2) {
            Py_DECREF(op); Py_DECREF(it);
            PyErr_SetString(PyExc_TypeError, "an op is a (key, size) tuple");
            return NULL;
        }
        key = PyTuple_GET_ITEM(op, 0);
        sz = PyTuple_GET_ITEM(op, 1);
        long long size = PyLong_AsLongLong(sz);
        if (size == -1 && PyErr_Occurred()) { Py_DECREF(op); Py_DECREF(it); return NULL; }
        int failed = 0;
        long small_key = -1;
        if (PyLong_CheckExact(key)) {
            int overflow;
            long v = PyLong_AsLongAndOverflow(key, &overflow);
            if (!overflow && v >= 0 && v + by < SLOT_LIMIT) small_key = v + by;
        }
        if (small_key < 0 && by && PyLong_Check(key)) {
            PyErr_SetString(PyExc_ValueError, "a moved key beyond the storage ids' range");
            failed = 1;
        } else if (small_key >= 0) {
            failed = slot_op(a, small_key, size) < 0;
        } else if (size) {
            int has = PyDict_Contains(a->live, key);
            if (has < 0) failed = 1;
            else if (has) {
                PyErr_Format(SymmemError, "allocation %R: allocated twice without a free", key);
                failed = 1;
            } else failed = do_malloc(a, key, size) < 0;
        } else {
            PyObject *v = PyDict_GetItemWithError(a->live, key);
            if (!v) {
                if (!PyErr_Occurred()) PyErr_Format(SymmemError, "allocation %R: freed but not allocated", key);
                failed = 1;
            } else {
                int i = (int)PyLong_AsLong(v);
                failed = PyDict_DelItem(a->live, key) < 0 || do_free(a, i) < 0;
            }
        }
        Py_DECREF(op);
        if (failed) { Py_DECREF(it); return NULL; }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Alloc_live(Alloc *a, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(PyDict_Size(a->live) + a->nslot_live);
}

static PyObject *Alloc_free_blocks(Alloc *a, PyObject *Py_UNUSED(ignored)) {
    /* the free blocks as the Python class's pools hold them: [(small, size, address)] in pool order */
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (int s = 1; s >= 0; s--) {
        for (Py_ssize_t r = 0; r < a->pools[s].len; r++) {
            for (Py_ssize_t j = a->pools[s].runs[r].len - 1; j >= 0; j--) {
                Block *b = &a->blocks[a->pools[s].runs[r].idx[j]];
                PyObject *t = Py_BuildValue("(OLL)", s ? Py_True : Py_False, b->size, b->address);
                if (!t || PyList_Append(out, t) < 0) { Py_XDECREF(t); Py_DECREF(out); return NULL; }
                Py_DECREF(t);
            }
        }
    }
    return out;
}

static int Alloc_init(Alloc *a, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, "")) return -1;
    a->live = PyDict_New();
    return a->live ? 0 : -1;
}

static void Alloc_dealloc(Alloc *a) {
    PyMem_Free(a->blocks);
    PyMem_Free(a->spare);
    PyMem_Free(a->slot);
    for (int s = 0; s < 2; s++) {
        Pool *p = &a->pools[s];
        for (Py_ssize_t r = 0; r < p->len; r++) PyMem_Free(p->runs[r].idx);
        for (Py_ssize_t r = 0; r < p->nspare; r++) PyMem_Free(p->spare[r].idx);
        PyMem_Free(p->runs);
        PyMem_Free(p->spare);
    }
    Py_XDECREF(a->live);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

#define GETTER(name) \
    static PyObject *get_##name(Alloc *a, void *c) { return PyLong_FromLongLong(a->name); }
GETTER(allocated)
GETTER(reserved)
GETTER(peak_allocated)
GETTER(peak_reserved)
GETTER(segments)

static PyGetSetDef Alloc_getset[] = {
    {"allocated", (getter)get_allocated, NULL, "bytes allocated now (block sizes)", NULL},
    {"reserved", (getter)get_reserved, NULL, "bytes reserved now (segment sizes)", NULL},
    {"peak_allocated", (getter)get_peak_allocated, NULL, "the peak of allocated", NULL},
    {"peak_reserved", (getter)get_peak_reserved, NULL, "the peak of reserved", NULL},
    {"segments", (getter)get_segments, NULL, "segments cudaMalloc'd", NULL},
    {NULL},
};

static PyMethodDef Alloc_methods[] = {
    {"run", (PyCFunction)Alloc_run, METH_VARARGS,
     "run(ops, by=0): replay (key, size) ops, size > 0 allocating, 0 freeing; integer keys moved on by `by`"},
    {"run_packed", (PyCFunction)Alloc_run_packed, METH_VARARGS,
     "run_packed(buffer, by=0): `run` over int64 (key, size) pairs, every key a storage id moved on by `by`"},
    {"live", (PyCFunction)Alloc_live, METH_NOARGS, "allocations not yet freed"},
    {"free_blocks", (PyCFunction)Alloc_free_blocks, METH_NOARGS, "the pools' free blocks (small, size, address)"},
    {NULL},
};

static PyTypeObject AllocType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "symmem.accounting._callocator.Allocator",
    .tp_basicsize = sizeof(Alloc),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PyTorch's caching allocator, replayed (symmem.accounting.allocator.CachingAllocator's rules)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Alloc_init,
    .tp_dealloc = (destructor)Alloc_dealloc,
    .tp_methods = Alloc_methods,
    .tp_getset = Alloc_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_callocator", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__callocator(void) {
    PyObject *errors = PyImport_ImportModule("symmem.errors");
    if (!errors) return NULL;
    SymmemError = PyObject_GetAttrString(errors, "SymmemError");
    Py_DECREF(errors);
    if (!SymmemError) return NULL;
    if (PyType_Ready(&AllocType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&AllocType);
    if (PyModule_AddObject(m, "Allocator", (PyObject *)&AllocType) < 0) {
        Py_DECREF(&AllocType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
