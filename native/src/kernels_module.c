/* The one binding file: a thin CPython surface over the C kernels (hnswlib's bindings.cpp pattern).
 * Kernels take raw addresses or buffers so that llama.cpp's own memory is read without a copy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "assemble.h"
#include "simd.h"
#include "block_select.h"
#include "crc32.h"
#include "eval_gate.h"
#include "quant.h"
#include "scale.h"
#include "surprise.h"

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, Py_ssize_t n, const char *name)
{
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len != itemsize * n) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, itemsize * n, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(surprise_doc,
"surprise(logits_address, n_rows, n_vocab, targets, out)\n\n"
"Write -log softmax(logits[r])[targets[r]] into out[r] (float32) for each row r.\n"
"logits_address is the integer address of a row-major float32 [n_rows, n_vocab] block\n"
"(e.g. llama_get_logits); targets is an int32 buffer of n_rows ids. Releases the GIL.");

static PyObject *py_surprise(PyObject *self, PyObject *args)
{
    unsigned long long address;
    Py_ssize_t n_rows, n_vocab;
    PyObject *targets_obj, *out_obj;
    (void)self;
    if (!PyArg_ParseTuple(args, "KnnOO", &address, &n_rows, &n_vocab, &targets_obj, &out_obj)) return NULL;
    if (address == 0 || n_rows < 0 || n_vocab <= 0) {
        PyErr_SetString(PyExc_ValueError, "surprise: null logits address or bad shape");
        return NULL;
    }
    Py_buffer targets, out;
    if (get_buffer(targets_obj, &targets, 0, 4, n_rows, "targets") < 0) return NULL;
    if (get_buffer(out_obj, &out, 1, 4, n_rows, "out") < 0) { PyBuffer_Release(&targets); return NULL; }
    const float *logits = (const float *)(uintptr_t)address;
    Py_BEGIN_ALLOW_THREADS
    epi_surprise_rows(logits, n_rows, n_vocab, (const int32_t *)targets.buf, (float *)out.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&targets);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

/* Row codecs by name; "f16" is plain half precision, the store's unquantized block type. */
typedef struct {
    const char *name;
    Py_ssize_t block_values, block_bytes;
    void (*encode)(const float *, uint8_t *, int64_t);
    void (*decode)(const uint8_t *, float *, int64_t);
} codec_t;

/* Byte-wise little-endian so a numpy uint8 view at any offset (and a big-endian host) is handled. */
static void f16_encode(const float *x, uint8_t *y, int64_t k)
{
    for (int64_t i = 0; i < k; i++) { const uint16_t h = epi_fp32_to_fp16(x[i]); y[2 * i] = (uint8_t)h; y[2 * i + 1] = (uint8_t)(h >> 8); }
}
static void f16_decode(const uint8_t *x, float *y, int64_t k)
{
    for (int64_t i = 0; i < k; i++) y[i] = epi_fp16_to_fp32((uint16_t)(x[2 * i] | (x[2 * i + 1] << 8)));
}

static const codec_t codecs[] = {
    {"f16", 1, 2, f16_encode, f16_decode},
    {"q8_0", EPI_QK, EPI_Q8_0_BLOCK_BYTES, epi_quantize_row_q8_0, epi_dequantize_row_q8_0},
    {"q4_0", EPI_QK, EPI_Q4_0_BLOCK_BYTES, epi_quantize_row_q4_0, epi_dequantize_row_q4_0},
};

static const codec_t *find_codec(const char *kind, Py_ssize_t n_values)
{
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++) {
        if (strcmp(codecs[i].name, kind) != 0) continue;
        if (n_values < 0 || n_values % codecs[i].block_values) {
            PyErr_Format(PyExc_ValueError, "%s: value count %zd is not a multiple of %zd", kind, n_values, codecs[i].block_values);
            return NULL;
        }
        return &codecs[i];
    }
    PyErr_Format(PyExc_ValueError, "unknown quantization kind '%s' (f16, q8_0, q4_0)", kind);
    return NULL;
}

PyDoc_STRVAR(quantize_doc,
"quantize(kind, x, out, n_values)\n\n"
"Encode n_values float32 from buffer x into buffer out (kind: f16, q8_0, q4_0; ggml block layout).\n"
"out must hold exactly n_values / block_values * block_bytes bytes. Releases the GIL.");

PyDoc_STRVAR(dequantize_doc,
"dequantize(kind, data, out, n_values)\n\n"
"Decode buffer data (ggml block layout of `kind`) into n_values float32 in buffer out. Releases the GIL.");

static PyObject *codec_call(PyObject *args, int encode)
{
    const char *kind;
    PyObject *src_obj, *dst_obj;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "sOOn", &kind, &src_obj, &dst_obj, &n)) return NULL;
    const codec_t *c = find_codec(kind, n);
    if (!c) return NULL;
    const Py_ssize_t n_bytes = n / c->block_values * c->block_bytes;
    Py_buffer src, dst;
    if (get_buffer(src_obj, &src, 0, 1, encode ? 4 * n : n_bytes, encode ? "x" : "data") < 0) return NULL;
    if (get_buffer(dst_obj, &dst, 1, 1, encode ? n_bytes : 4 * n, "out") < 0) { PyBuffer_Release(&src); return NULL; }
    Py_BEGIN_ALLOW_THREADS
    if (encode) c->encode((const float *)src.buf, (uint8_t *)dst.buf, n);
    else c->decode((const uint8_t *)src.buf, (float *)dst.buf, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyObject *py_quantize(PyObject *self, PyObject *args) { (void)self; return codec_call(args, 1); }
static PyObject *py_dequantize(PyObject *self, PyObject *args) { (void)self; return codec_call(args, 0); }

PyDoc_STRVAR(scale_rows_doc,
"scale_rows(x, factors, out, n_rows, n_cols)\n\n"
"out[r, :] = x[r, :] * factors[r] for a row-major float32 [n_rows, n_cols] x; out may be x. Releases the GIL.");

static PyObject *py_scale_rows(PyObject *self, PyObject *args)
{
    PyObject *x_obj, *f_obj, *out_obj;
    Py_ssize_t n_rows, n_cols;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOnn", &x_obj, &f_obj, &out_obj, &n_rows, &n_cols)) return NULL;
    if (n_rows < 0 || n_cols < 0) { PyErr_SetString(PyExc_ValueError, "scale_rows: negative shape"); return NULL; }
    Py_buffer x, f, out;
    if (get_buffer(x_obj, &x, 0, 4, n_rows * n_cols, "x") < 0) return NULL;
    if (get_buffer(f_obj, &f, 0, 4, n_rows, "factors") < 0) { PyBuffer_Release(&x); return NULL; }
    if (get_buffer(out_obj, &out, 1, 4, n_rows * n_cols, "out") < 0) { PyBuffer_Release(&x); PyBuffer_Release(&f); return NULL; }
    Py_BEGIN_ALLOW_THREADS
    epi_scale_rows((const float *)x.buf, (const float *)f.buf, (float *)out.buf, n_rows, n_cols);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&x);
    PyBuffer_Release(&f);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(assemble_state_blob_doc,
"assemble_state_blob(kind, positions, k_rows, v_rows, n_layer, n_cells, n_embd_k, n_embd_v, v_trans, src_seq,\n"
"                    cell_seq, v_scale, shift, out)\n\n"
"Write llama.cpp's sequence state blob for an epi payload's sections into buffer out (exactly the blob's size):\n"
"positions (n_cells little-endian i32), k_rows / v_rows ([n_layer, n_cells] rows of `kind`: f16, q8_0, q4_0).\n"
"K and V become f16, V is multiplied by v_scale when v_scale != 1.0 and transposed when v_trans.\n"
"shift: None, or (delta, head_dim, n_rot, neox, freq_base, freq_scale, fused): every position moves by delta and K\n"
"is rotated by it as llama.cpp's K-shift does (rope_shift.h). Releases the GIL.");

/* a * b for non-negative sizes, -1 on overflow */
static Py_ssize_t size_mul(Py_ssize_t a, Py_ssize_t b)
{
    if (a < 0 || b < 0 || (b && a > PY_SSIZE_T_MAX / b)) return -1;
    return a * b;
}

static PyObject *py_assemble_state_blob(PyObject *self, PyObject *args)
{
    const char *kind_name;
    PyObject *pos_obj, *k_obj, *v_obj, *shift_obj, *out_obj;
    Py_ssize_t n_layer, n_cells, n_embd_k, n_embd_v;
    int v_trans, src_seq, cell_seq;
    double v_scale;
    (void)self;
    if (!PyArg_ParseTuple(args, "sOOOnnnnpiidOO", &kind_name, &pos_obj, &k_obj, &v_obj, &n_layer, &n_cells, &n_embd_k,
                          &n_embd_v, &v_trans, &src_seq, &cell_seq, &v_scale, &shift_obj, &out_obj)) return NULL;
    epi_rope_shift shift = {0};
    const int shifted = shift_obj != Py_None;
    PyObject *factors_obj = Py_None;
    Py_buffer factors = {0};
    if (shifted) {
        if (!PyArg_ParseTuple(shift_obj, "iiiiffpO;shift must be (delta, head_dim, n_rot, neox, freq_base, freq_scale, "
                              "fused, freq_factors)", &shift.delta, &shift.head_dim, &shift.n_rot, &shift.neox,
                              &shift.freq_base, &shift.freq_scale, &shift.fused, &factors_obj)) return NULL;
        if (!epi_rope_shift_valid(&shift, n_embd_k)) {
            PyErr_Format(PyExc_ValueError, "assemble_state_blob: cannot rotate K rows of %zd values by heads of %d "
                         "with %d rotated dimensions", n_embd_k, (int)shift.head_dim, (int)shift.n_rot);
            return NULL;
        }
    }
    epi_row_kind kind;
    if (strcmp(kind_name, "f16") == 0) kind = EPI_ROWS_F16;
    else if (strcmp(kind_name, "q8_0") == 0) kind = EPI_ROWS_Q8_0;
    else if (strcmp(kind_name, "q4_0") == 0) kind = EPI_ROWS_Q4_0;
    else { PyErr_Format(PyExc_ValueError, "unknown quantization kind '%s' (f16, q8_0, q4_0)", kind_name); return NULL; }
    /* Dimensions come from a u32 header; the bound keeps the sums and doublings below from overflowing. */
    const int64_t limit = PY_SSIZE_T_MAX / 8 < (INT64_C(1) << 31) ? PY_SSIZE_T_MAX / 8 : (INT64_C(1) << 31);
    if (n_layer < 0 || n_cells < 0 || n_embd_k < 0 || n_embd_v < 0 || n_layer >= limit || n_cells >= limit ||
        n_embd_k >= limit || n_embd_v >= limit) {
        PyErr_SetString(PyExc_ValueError, "assemble_state_blob: negative or oversized shape");
        return NULL;
    }
    const int64_t kb = epi_payload_row_bytes(kind, n_embd_k), vb = epi_payload_row_bytes(kind, n_embd_v);
    if (kb < 0 || vb < 0) {
        PyErr_Format(PyExc_ValueError, "%s: row widths %zd and %zd must be multiples of %d", kind_name, n_embd_k,
                     n_embd_v, EPI_QK);
        return NULL;
    }
    const Py_ssize_t layer_cells = size_mul(n_layer, n_cells);
    const Py_ssize_t k_len = size_mul(layer_cells, (Py_ssize_t)kb), v_len = size_mul(layer_cells, (Py_ssize_t)vb);
    const Py_ssize_t rows_len = size_mul(layer_cells, 2 * (n_embd_k + n_embd_v));
    const int64_t out_len = rows_len < 0 ? -1 : epi_state_blob_size(n_layer, n_cells, n_embd_k, n_embd_v);
    if (layer_cells < 0 || k_len < 0 || v_len < 0 || out_len < 0 || out_len > PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "assemble_state_blob: block too large");
        return NULL;
    }
    if (shifted && factors_obj != Py_None) {  /* float32 [n_rot / 2], kept alive until the blob is built */
        if (get_buffer(factors_obj, &factors, 0, 4, shift.n_rot / 2, "freq_factors") < 0) return NULL;
        shift.freq_factors = (const float *)factors.buf;
    }
    Py_buffer pos, k, v, out;
    if (get_buffer(pos_obj, &pos, 0, 4, n_cells, "positions") < 0) { PyBuffer_Release(&factors); return NULL; }
    if (get_buffer(k_obj, &k, 0, 1, k_len, "k_rows") < 0) {
        PyBuffer_Release(&pos); PyBuffer_Release(&factors);
        return NULL;
    }
    if (get_buffer(v_obj, &v, 0, 1, v_len, "v_rows") < 0) {
        PyBuffer_Release(&pos); PyBuffer_Release(&k); PyBuffer_Release(&factors);
        return NULL;
    }
    if (get_buffer(out_obj, &out, 1, 1, (Py_ssize_t)out_len, "out") < 0) {
        PyBuffer_Release(&pos); PyBuffer_Release(&k); PyBuffer_Release(&v); PyBuffer_Release(&factors);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = epi_assemble_state_blob(kind, (const uint8_t *)pos.buf, (const uint8_t *)k.buf, (const uint8_t *)v.buf,
                                 n_layer, n_cells, n_embd_k, n_embd_v, v_trans, (int32_t)src_seq, (int32_t)cell_seq,
                                 v_scale, shifted ? &shift : NULL, (uint8_t *)out.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&pos); PyBuffer_Release(&k); PyBuffer_Release(&v); PyBuffer_Release(&out);
    PyBuffer_Release(&factors);
    if (rc != 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(block_scores_doc,
"block_scores(query, rep_keys, rep_count, n_layer, n_head, n_head_kv, head_dim, n_blocks, n_rep, scores)\n\n"
"scores[l, b] (float32) = mean over block b's rep_count[b] representative keys of the head-summed dot products\n"
"with query[l] (float32 [n_layer, n_head, head_dim]); rep_keys: float16 [n_blocks, n_layer, n_rep,\n"
"n_head_kv * head_dim]; rep_count: int32 [n_blocks]. Releases the GIL.");

static PyObject *py_block_scores(PyObject *self, PyObject *args)
{
    PyObject *q_obj, *k_obj, *c_obj, *out_obj;
    Py_ssize_t n_layer, n_head, n_head_kv, head_dim, n_blocks, n_rep;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOnnnnnnO", &q_obj, &k_obj, &c_obj, &n_layer, &n_head, &n_head_kv, &head_dim,
                          &n_blocks, &n_rep, &out_obj)) return NULL;
    if (n_layer < 0 || n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv || head_dim <= 0 || n_blocks < 0 ||
        n_rep < 0) {
        PyErr_SetString(PyExc_ValueError, "block_scores: bad shape (n_head must be a multiple of n_head_kv)");
        return NULL;
    }
    Py_buffer q, k, c, out;
    if (get_buffer(q_obj, &q, 0, 4, n_layer * n_head * head_dim, "query") < 0) return NULL;
    if (get_buffer(k_obj, &k, 0, 2, n_blocks * n_layer * n_rep * n_head_kv * head_dim, "rep_keys") < 0) {
        PyBuffer_Release(&q);
        return NULL;
    }
    if (get_buffer(c_obj, &c, 0, 4, n_blocks, "rep_count") < 0) { PyBuffer_Release(&q); PyBuffer_Release(&k); return NULL; }
    for (Py_ssize_t b = 0; b < n_blocks; b++) {
        const int32_t count = ((const int32_t *)c.buf)[b];
        if (count < 0 || count > n_rep) {
            PyErr_Format(PyExc_ValueError, "block_scores: rep_count[%zd] = %d is outside 0..%zd", b, count, n_rep);
            PyBuffer_Release(&q); PyBuffer_Release(&k); PyBuffer_Release(&c);
            return NULL;
        }
    }
    if (get_buffer(out_obj, &out, 1, 4, n_layer * n_blocks, "scores") < 0) {
        PyBuffer_Release(&q); PyBuffer_Release(&k); PyBuffer_Release(&c);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = epi_block_scores((const float *)q.buf, (const uint16_t *)k.buf, (const int32_t *)c.buf, n_layer, n_head,
                          n_head_kv, head_dim, n_blocks, n_rep, (float *)out.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&q); PyBuffer_Release(&k); PyBuffer_Release(&c); PyBuffer_Release(&out);
    if (rc != 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(select_blocks_doc,
"select_blocks(scores, n_tokens, n_layer, n_blocks, budget, visible)\n\n"
"visible[l, b] (uint8) = 1 for the blocks layer l keeps: by falling scores[l] (ties: lower index), each block whose\n"
"n_tokens[b] (int32) still fits in the token budget. Holds the GIL (qsort's comparator reads a file-level row).");

static PyObject *py_select_blocks(PyObject *self, PyObject *args)
{
    PyObject *s_obj, *n_obj, *out_obj;
    Py_ssize_t n_layer, n_blocks, budget;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOnnnO", &s_obj, &n_obj, &n_layer, &n_blocks, &budget, &out_obj)) return NULL;
    if (n_layer < 0 || n_blocks < 0) { PyErr_SetString(PyExc_ValueError, "select_blocks: negative shape"); return NULL; }
    Py_buffer s, n, out;
    if (get_buffer(s_obj, &s, 0, 4, n_layer * n_blocks, "scores") < 0) return NULL;
    if (get_buffer(n_obj, &n, 0, 4, n_blocks, "n_tokens") < 0) { PyBuffer_Release(&s); return NULL; }
    if (get_buffer(out_obj, &out, 1, 1, n_layer * n_blocks, "visible") < 0) {
        PyBuffer_Release(&s); PyBuffer_Release(&n);
        return NULL;
    }
    const int rc = epi_select_blocks((const float *)s.buf, (const int32_t *)n.buf, n_layer, n_blocks, budget,
                                     (uint8_t *)out.buf);
    PyBuffer_Release(&s); PyBuffer_Release(&n); PyBuffer_Release(&out);
    if (rc < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(eval_gate_address_doc,
"eval_gate_address() -> int\n\n"
"The address of epi_eval_gate, a ggml eval callback to install as cb_eval with a struct epi_eval_gate * as its\n"
"user data (eval_gate.h): closed, it answers every node in C; open, it forwards to the inner callback.");

static PyObject *py_eval_gate_address(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)&epi_eval_gate);
}

PyDoc_STRVAR(rope_shift_fused_default_doc,
"rope_shift_fused_default() -> bool\n\n"
"Whether llama.cpp built for this CPU fuses RoPE's multiply-adds (x86 with FMA, arm64): the `fused` to shift with.");

static PyObject *py_rope_shift_fused_default(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    return PyBool_FromLong(epi_rope_shift_fused_default());
}

PyDoc_STRVAR(set_simd_doc,
"set_simd(enabled) -> bool\n\n"
"Turn the SIMD paths off or back on (where the CPU has them): the assembler's AVX2/F16C/FMA rows and crc32's\n"
"PCLMULQDQ folding; returns the previous setting. They compute the same bits as the scalar paths: for tests and\n"
"side-by-side benchmarks.");

static PyObject *py_set_simd(PyObject *self, PyObject *args)
{
    int on;
    (void)self;
    if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    return PyBool_FromLong(epi_simd_set_enabled(on));
}

PyDoc_STRVAR(simd_usable_doc, "simd_usable() -> bool\n\nWhether the AVX2/F16C/FMA paths run now.");

static PyObject *py_simd_usable(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    return PyBool_FromLong(epi_simd_usable());
}

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0) -> int\n\n"
"zlib.crc32(data, value), bit for bit, for any contiguous buffer (bytes, memoryview, mmap, numpy array): with\n"
"carry-less multiplies where the CPU has PCLMULQDQ (crc32_folding()), a table otherwise.");

static PyObject *py_crc32(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned int value = 0;
    uint32_t crc;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value)) return NULL;
    if (view.len >= 65536) {  /* a block file's payload: let other threads run meanwhile */
        Py_BEGIN_ALLOW_THREADS
        crc = epi_crc32(value, (const unsigned char *)view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = epi_crc32(value, (const unsigned char *)view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(crc32_folding_doc, "crc32_folding() -> bool\n\nWhether crc32 runs its PCLMULQDQ path now.");

static PyObject *py_crc32_folding(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    return PyBool_FromLong(epi_crc32_folding());
}

static PyMethodDef methods[] = {
    {"crc32", py_crc32, METH_VARARGS, crc32_doc},
    {"crc32_folding", py_crc32_folding, METH_NOARGS, crc32_folding_doc},
    {"set_simd", py_set_simd, METH_VARARGS, set_simd_doc},
    {"simd_usable", py_simd_usable, METH_NOARGS, simd_usable_doc},
    {"rope_shift_fused_default", py_rope_shift_fused_default, METH_NOARGS, rope_shift_fused_default_doc},
    {"eval_gate_address", py_eval_gate_address, METH_NOARGS, eval_gate_address_doc},
    {"surprise", py_surprise, METH_VARARGS, surprise_doc},
    {"quantize", py_quantize, METH_VARARGS, quantize_doc},
    {"dequantize", py_dequantize, METH_VARARGS, dequantize_doc},
    {"scale_rows", py_scale_rows, METH_VARARGS, scale_rows_doc},
    {"assemble_state_blob", py_assemble_state_blob, METH_VARARGS, assemble_state_blob_doc},
    {"block_scores", py_block_scores, METH_VARARGS, block_scores_doc},
    {"select_blocks", py_select_blocks, METH_VARARGS, select_blocks_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "epi native kernels", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void)
{
    epi_crc32_init();  /* under the import lock: crc32 releases the GIL, so no thread may build its table lazily */
    return PyModule_Create(&module);
}
