/* A stand-in of the CUDA driver's graph entry points as a C shared library, for
 * tests/test_graph_launch.py: kernelgen.graph_launch.Driver loads it with ctypes exactly as it
 * loads libcuda.so.1, so the foreign calls go through ctypes' real argument conversion (argtypes,
 * byref objects, c_void_p instances, NULL) and the node parameters are read through the C layout
 * of CUDA_KERNEL_NODE_PARAMS_v2 below, written from the CUDA driver API reference (cuda.h,
 * CUDA 12): func, gridDim{X,Y,Z}, blockDim{X,Y,Z}, sharedMemBytes, kernelParams, extra, kern, ctx.
 *
 * Semantics kept from the driver: a node's parameters (the struct and the bytes behind
 * kernelParams[0]) are copied when the node is added or set; instantiation copies the graph's
 * nodes; cuGraphExecKernelNodeSetParams must keep the node's function; a launch records the
 * executable graph's nodes, in order, with the stream.  Handles are small tagged integers; a
 * destroyed handle, an unknown one or a second destroy returns CUDA_ERROR_INVALID_VALUE (1).
 * The parameter size of each function comes from stub_set_param_size.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;

typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
    void *func;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    void *kern;
    void *ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;

#define MAXP 1024      /* parameter bytes kept per node */
#define MAXN 512       /* nodes */
#define MAXG 128       /* graphs */
#define MAXE 128       /* executable graphs */
#define MAXK 8         /* nodes per graph */
#define MAXL 1024      /* launched nodes recorded */
#define MAXF 256       /* functions with a parameter size (every fake kernel kind a test worker registers) */

typedef struct {
    void *func;
    unsigned int dims[7];          /* grid xyz, block xyz, shared memory */
    void *extra, *kern, *ctx;
    unsigned char params[MAXP];
    size_t psize;
} Node;

static Node nodes[MAXN];
static int n_nodes;
static int graph_nodes[MAXG][MAXK], graph_n[MAXG], graph_live[MAXG], n_graphs;
static Node exec_nodes[MAXE][MAXK];
static int exec_ids[MAXE][MAXK], exec_n[MAXE], exec_live[MAXE], n_execs;
static unsigned long long exec_flags[MAXE];
static Node launched[MAXL];
static uintptr_t launched_stream[MAXL];
static int n_launched, n_graph_launches, n_set_params, n_exec_destroys, n_graph_destroys;
static void *size_func[MAXF];
static size_t size_bytes[MAXF];
static int n_sizes;
/* CUresult returned by the next call of an entry point when set (then cleared): index as below */
static CUresult fail_next[7];
enum { F_CREATE, F_ADD, F_INST, F_SET, F_LAUNCH, F_EXEC_DESTROY, F_DESTROY };

#define GRAPH_TAG 0x10000u
#define NODE_TAG 0x20000u
#define EXEC_TAG 0x30000u

static CUresult take_fail(int which) {
    CUresult rc = fail_next[which];
    fail_next[which] = 0;
    return rc;
}

static int index_of(void *handle, uintptr_t tag, int count) {
    uintptr_t h = (uintptr_t)handle;
    if (h < tag || h >= tag + (uintptr_t)count)
        return -1;
    return (int)(h - tag);
}

static int read_node(Node *dst, const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    size_t size = 0;
    for (int i = 0; i < n_sizes; ++i)
        if (size_func[i] == p->func)
            size = size_bytes[i];
    if (size == 0 || size > MAXP || p->kernelParams == NULL)
        return 1;
    dst->func = p->func;
    dst->dims[0] = p->gridDimX; dst->dims[1] = p->gridDimY; dst->dims[2] = p->gridDimZ;
    dst->dims[3] = p->blockDimX; dst->dims[4] = p->blockDimY; dst->dims[5] = p->blockDimZ;
    dst->dims[6] = p->sharedMemBytes;
    dst->extra = p->extra; dst->kern = p->kern; dst->ctx = p->ctx;
    memcpy(dst->params, p->kernelParams[0], size);
    dst->psize = size;
    return 0;
}

CUresult cuGraphCreate(void **phGraph, unsigned int flags) {
    CUresult rc = take_fail(F_CREATE);
    if (rc) return rc;
    if (phGraph == NULL || flags != 0 || n_graphs >= MAXG) return 1;
    graph_n[n_graphs] = 0;
    graph_live[n_graphs] = 1;
    *phGraph = (void *)(uintptr_t)(GRAPH_TAG + n_graphs++);
    return 0;
}

CUresult cuGraphAddKernelNode_v2(void **phNode, void *hGraph, void *const *deps, size_t ndeps,
                                 const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    CUresult rc = take_fail(F_ADD);
    if (rc) return rc;
    int g = index_of(hGraph, GRAPH_TAG, n_graphs);
    if (g < 0 || !graph_live[g] || phNode == NULL || p == NULL || n_nodes >= MAXN || graph_n[g] >= MAXK) return 1;
    /* a chain: the first node without dependencies, each later one after the previous */
    if (graph_n[g] == 0 ? (ndeps != 0) : (ndeps != 1 || deps == NULL ||
            deps[0] != (void *)(uintptr_t)(NODE_TAG + graph_nodes[g][graph_n[g] - 1])))
        return 1;
    if (read_node(&nodes[n_nodes], p)) return 1;
    graph_nodes[g][graph_n[g]++] = n_nodes;
    *phNode = (void *)(uintptr_t)(NODE_TAG + n_nodes++);
    return 0;
}

CUresult cuGraphInstantiateWithFlags(void **phExec, void *hGraph, unsigned long long flags) {
    CUresult rc = take_fail(F_INST);
    if (rc) return rc;
    int g = index_of(hGraph, GRAPH_TAG, n_graphs);
    if (g < 0 || !graph_live[g] || phExec == NULL || n_execs >= MAXE) return 1;
    int e = n_execs++;
    exec_n[e] = graph_n[g];
    for (int i = 0; i < graph_n[g]; ++i) {
        exec_ids[e][i] = graph_nodes[g][i];
        exec_nodes[e][i] = nodes[graph_nodes[g][i]];
    }
    exec_live[e] = 1;
    exec_flags[e] = flags;
    *phExec = (void *)(uintptr_t)(EXEC_TAG + e);
    return 0;
}

CUresult cuGraphExecKernelNodeSetParams_v2(void *hExec, void *hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    CUresult rc = take_fail(F_SET);
    if (rc) return rc;
    int e = index_of(hExec, EXEC_TAG, n_execs), n = index_of(hNode, NODE_TAG, n_nodes);
    if (e < 0 || !exec_live[e] || n < 0 || p == NULL) return 1;
    for (int i = 0; i < exec_n[e]; ++i) {
        if (exec_ids[e][i] == n) {
            Node tmp;
            if (read_node(&tmp, p) || tmp.func != exec_nodes[e][i].func) return 1;
            exec_nodes[e][i] = tmp;
            ++n_set_params;
            return 0;
        }
    }
    return 1;
}

CUresult cuGraphLaunch(void *hExec, void *hStream) {
    CUresult rc = take_fail(F_LAUNCH);
    if (rc) return rc;
    int e = index_of(hExec, EXEC_TAG, n_execs);
    if (e < 0 || !exec_live[e] || n_launched + exec_n[e] > MAXL) return 1;
    for (int i = 0; i < exec_n[e]; ++i) {
        launched[n_launched] = exec_nodes[e][i];
        launched_stream[n_launched++] = (uintptr_t)hStream;
    }
    ++n_graph_launches;
    return 0;
}

CUresult cuGraphExecDestroy(void *hExec) {
    CUresult rc = take_fail(F_EXEC_DESTROY);
    ++n_exec_destroys;
    if (rc) return rc;
    int e = index_of(hExec, EXEC_TAG, n_execs);
    if (e < 0 || !exec_live[e]) return 1;
    exec_live[e] = 0;
    return 0;
}

CUresult cuGraphDestroy(void *hGraph) {
    CUresult rc = take_fail(F_DESTROY);
    ++n_graph_destroys;
    if (rc) return rc;
    int g = index_of(hGraph, GRAPH_TAG, n_graphs);
    if (g < 0 || !graph_live[g]) return 1;
    graph_live[g] = 0;
    return 0;
}

/* ------------------------------------------------------------------ test accessors */
int stub_set_param_size(void *func, size_t size) {
    if (n_sizes >= MAXF) return 1;
    size_func[n_sizes] = func;
    size_bytes[n_sizes++] = size;
    return 0;
}

void stub_fail_next(int which, CUresult rc) { fail_next[which] = rc; }

size_t stub_params_layout(size_t *offsets) {
    offsets[0] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, func);
    offsets[1] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimX);
    offsets[2] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimY);
    offsets[3] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimZ);
    offsets[4] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, blockDimX);
    offsets[5] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, blockDimY);
    offsets[6] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, blockDimZ);
    offsets[7] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, sharedMemBytes);
    offsets[8] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kernelParams);
    offsets[9] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, extra);
    offsets[10] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kern);
    offsets[11] = offsetof(CUDA_KERNEL_NODE_PARAMS_v2, ctx);
    return sizeof(CUDA_KERNEL_NODE_PARAMS_v2);
}

int stub_counts(int *out) {
    int live_execs = 0, live_graphs = 0;
    for (int e = 0; e < n_execs; ++e) live_execs += exec_live[e];
    for (int g = 0; g < n_graphs; ++g) live_graphs += graph_live[g];
    out[0] = n_graphs; out[1] = live_graphs; out[2] = n_execs; out[3] = live_execs;
    out[4] = n_graph_launches; out[5] = n_set_params; out[6] = n_launched;
    out[7] = n_exec_destroys; out[8] = n_graph_destroys;
    return 0;
}

/* launched node i: function, the seven dims, stream, extra/kern/ctx, parameter bytes; returns the size */
size_t stub_launched(int i, uintptr_t *func, unsigned int *dims, uintptr_t *stream, uintptr_t *ekc,
                     unsigned char *params) {
    if (i < 0 || i >= n_launched) return 0;
    Node *n = &launched[i];
    *func = (uintptr_t)n->func;
    memcpy(dims, n->dims, sizeof n->dims);
    *stream = launched_stream[i];
    ekc[0] = (uintptr_t)n->extra; ekc[1] = (uintptr_t)n->kern; ekc[2] = (uintptr_t)n->ctx;
    memcpy(params, n->params, n->psize);
    return n->psize;
}

unsigned long long stub_exec_flags(int e) { return e >= 0 && e < n_execs ? exec_flags[e] : ~0ull; }
