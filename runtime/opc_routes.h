/* opc_routes.h -- which of the runtime's kernels ran: a counter per route, read by opc.profile.
 *
 * A conv reaches one of a dozen kernels by its geometry (opc_nn.h's dispatch), and every one of them
 * computes the same numbers: a test comparing results cannot see a geometry fall back to a slower
 * kernel. While a module's profile is on, each dispatch counts the route it took here, and
 * Profile.routes() (and `opc profile`) show the counts by name; tests assert them.
 *
 * The counters are weak hidden definitions, one copy per extension: the module's own C (its
 * profile_support, which switches them on and reads them) and each runtime object it links define
 * them, and the linker keeps one. Off, a route costs one load and a branch per kernel call. */
#ifndef OPC_ROUTES_H
#define OPC_ROUTES_H
#include <stdint.h>

/* X(ENUM, "name"): the name is Profile.routes()'s key; op, then kernel */
#define OPC_RT_ROUTES(X)                                                                                       \
    X(CONV_DIRECT, "conv: direct")                 /* stride-1 tiles over a padded copy (opc_cf_conv) */     \
    X(CONV_CHANNEL_VECTOR, "conv: channel vector") /* rows of outputs, 32 channels a tile (opc_cw_conv) */    \
    X(CONV_FEW_POSITIONS, "conv: few positions")   /* at most 8 outputs a channel, transposed */             \
    X(CONV_POINTWISE_GEMM, "conv: pointwise gemm") /* 1x1 as one GEMM, bias and act in its store */          \
    X(CONV_IM2COL_GEMM, "conv: im2col gemm")       /* any dtype: im2col, then the GEMM */                    \
    X(CONV_LOOPS, "conv: loops")                   /* any dtype: a loop nest per output row */               \
    X(CONV_EPILOGUE_PASS, "conv: epilogue pass")   /* the fused epilogue as a pass after the conv */         \
    X(DEPTHWISE_ROWS, "depthwise: rows")           /* rows of a vector or more (opc_cf_dw_planes_run) */     \
    X(DEPTHWISE_PLANE_VECTOR, "depthwise: plane vector") /* a plane of a few vectors, permutes (dwv) */      \
    X(DEPTHWISE_GROUPED, "depthwise: grouped")     /* planes of <= 8 positions, several a vector (dwg) */    \
    X(DEPTHWISE_CHANNELS_LAST, "depthwise: channels last") /* narrow rows, 16 channels a vector (dwc) */     \
    X(DEPTHWISE_PLANES, "depthwise: planes")       /* the rest, a plane at a time (opc_cf_dw_run) */         \
    X(CONV_LAYOUT_POINTWISE, "conv channels-last: pointwise gemm") /* the GEMM reading / writing it transposed */ \
    X(CONV_LAYOUT_DEPTHWISE, "conv channels-last: depthwise") /* a position's channels as vectors */          \
    X(CONV_LAYOUT_LOOPS, "conv channels-last: loops") /* any dtype or geometry: a loop nest per output row */ \
    X(CONV_GRAD_INPUT_DIRECT, "conv_grad_input: direct")                                                      \
    X(CONV_GRAD_INPUT_DEPTHWISE, "conv_grad_input: depthwise")                                                \
    X(CONV_GRAD_INPUT_IM2COL_GEMM, "conv_grad_input: gemm col2im")                                            \
    X(CONV_GRAD_INPUT_LOOPS, "conv_grad_input: loops")                                                        \
    X(CONV_GRAD_FILTER_DIRECT, "conv_grad_filter: direct")                                                    \
    X(CONV_GRAD_FILTER_DEPTHWISE, "conv_grad_filter: depthwise")                                              \
    X(CONV_GRAD_FILTER_IM2COL_GEMM, "conv_grad_filter: im2col gemm")                                          \
    X(CONV_GRAD_FILTER_LOOPS, "conv_grad_filter: loops")                                                      \
    X(MAX_POOL_SEPARABLE, "max_pool: separable 3x3")  /* values only: row maxima, then column maxima */      \
    X(MAX_POOL_PADDED_PLANES, "max_pool: padded planes") /* values only: planes padded with -inf */         \
    X(MAX_POOL_2X2_PLANES, "max_pool: 2x2 planes")    /* 2x2 windows at stride 2, a plane at a time */       \
    X(MAX_POOL_ROWS, "max_pool: rows")                /* any dtype: a row of outputs at a time */            \
    X(AVG_POOL_2X2_PLANES, "avg_pool: 2x2 planes")                                                            \
    X(AVG_POOL_ROWS, "avg_pool: rows")

#define OPC_RT_ROUTE_ENUM(e, name) OPC_ROUTE_##e,
enum { OPC_RT_ROUTES(OPC_RT_ROUTE_ENUM) OPC_ROUTE_COUNT };
#undef OPC_RT_ROUTE_ENUM

__attribute__((weak, visibility("hidden"))) int opc_rt_routes_on;
__attribute__((weak, visibility("hidden"))) int64_t opc_rt_route_counts[OPC_ROUTE_COUNT];

static inline void opc_rt_route(int route) {
    if (__builtin_expect(opc_rt_routes_on, 0)) __atomic_fetch_add(&opc_rt_route_counts[route], 1, __ATOMIC_RELAXED);
}

#endif
