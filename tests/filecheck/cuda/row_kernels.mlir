// RUN: opc compile %s --target cuda --emit cuda | filecheck %s
// On CUDA a row kernel of the schedule is ONE __global__: a warp per row for
// short rows (shuffles only), a block per row for long ones (shuffles within
// each warp, then one __shared__ slot per warp). Every thread of the team ends
// with the same row max and sum and applies sub/exp/div to its own elements.

func.func @softmax_short(%x: tensor<6x40xf32>) -> tensor<6x40xf32> {
  %m = opc.reduce_max %x {axes = array<i64: 1>, keepdim = true} : (tensor<6x40xf32>) -> tensor<6x1xf32>
  %s = opc.sub %x, %m : (tensor<6x40xf32>, tensor<6x1xf32>) -> tensor<6x40xf32>
  %e = opc.exp %s : (tensor<6x40xf32>) -> tensor<6x40xf32>
  %z = opc.reduce_sum %e {axes = array<i64: 1>, keepdim = true} : (tensor<6x40xf32>) -> tensor<6x1xf32>
  %y = opc.div %e, %z : (tensor<6x40xf32>, tensor<6x1xf32>) -> tensor<6x40xf32>
  func.return %y : tensor<6x40xf32>
}

// CHECK-LABEL: __global__ void __launch_bounds__(256) opc_k_softmax_short_0(const float *x_0, float *out0_1) {
// CHECK-NEXT:    const int opc_t = threadIdx.x % 32;
// CHECK-NEXT:    for (int64_t opc_row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; opc_row < 6;
// CHECK-NOT:     __syncthreads
// CHECK:           for (int64_t [[J:v_[0-9]+]] = {{.*}} + opc_t * {{.*}}; [[J]] < {{.*}}; [[J]] += 32 * {{.*}}) {
// CHECK:             const float {{v_[0-9]+}} = (([[MAX:v_[0-9]+]] != [[MAX]] || [[MAX]] > {{v_[0-9]+}}) ? [[MAX]] : {{v_[0-9]+}});
// CHECK:           for (int opc_off = 16; opc_off > 0; opc_off /= 2) {
// CHECK-NEXT:        const float opc_o0 = (float)__shfl_down_sync(0xffffffffu, (float)[[MAX]], opc_off);
// CHECK:           [[MAX]] = (float)__shfl_sync(0xffffffffu, (float)[[MAX]], 0);
// CHECK:             opc_expf
// CHECK:           __shfl_down_sync
// CHECK:           [[SUM:v_[0-9]+]] = (float)__shfl_sync(0xffffffffu, (float)[[SUM]], 0);
// CHECK:             = ({{v_[0-9]+}} / [[SUM]]);
// CHECK-NEXT:        out0_1[{{.*}}] =
// CHECK-NOT:     __global__
// CHECK:       extern "C" int opc_fn_softmax_short(
// CHECK-NEXT:    int status = 0;
// CHECK-NEXT:    opc_k_softmax_short_0<<<1, 192>>>(x_0, out0_1);
// CHECK-NOT:     <<<
// CHECK:       cleanup:

func.func @softmax_long(%x: tensor<4x3000xf32>) -> tensor<4x3000xf32> {
  %m = opc.reduce_max %x {axes = array<i64: 1>, keepdim = true} : (tensor<4x3000xf32>) -> tensor<4x1xf32>
  %s = opc.sub %x, %m : (tensor<4x3000xf32>, tensor<4x1xf32>) -> tensor<4x3000xf32>
  %e = opc.exp %s : (tensor<4x3000xf32>) -> tensor<4x3000xf32>
  %z = opc.reduce_sum %e {axes = array<i64: 1>, keepdim = true} : (tensor<4x3000xf32>) -> tensor<4x1xf32>
  %y = opc.div %e, %z : (tensor<4x3000xf32>, tensor<4x1xf32>) -> tensor<4x3000xf32>
  func.return %y : tensor<4x3000xf32>
}

// CHECK-LABEL: __global__ void __launch_bounds__(256) opc_k_softmax_long_0(const float *x_0, float *out0_1) {
// CHECK-NEXT:    const int opc_t = threadIdx.x % 256;
// CHECK-NEXT:    __shared__ float opc_red0_0[8];
// CHECK-NEXT:    __shared__ float opc_red1_0[8];
// CHECK-NEXT:    for (int64_t opc_row = blockIdx.x; opc_row < 4; opc_row += gridDim.x) {
// CHECK:           for (int64_t [[J:v_[0-9]+]] = {{.*}} + opc_t * {{.*}}; [[J]] < {{.*}}; [[J]] += 256 * {{.*}}) {
// CHECK:           __shfl_down_sync(0xffffffffu, (float)[[MAX:v_[0-9]+]], opc_off);
// CHECK:           if (opc_t % 32 == 0) {
// CHECK-NEXT:        opc_red0_0[opc_t / 32] = [[MAX]];
// CHECK-NEXT:      }
// CHECK-NEXT:      __syncthreads();
// CHECK-NEXT:      [[MAX]] = opc_red0_0[0];
// CHECK-NEXT:      for (int opc_w = 1; opc_w < 8; ++opc_w) {
// CHECK-NEXT:        const float opc_o0 = opc_red0_0[opc_w];
// CHECK-NEXT:        [[MAX]] = (([[MAX]] != [[MAX]] || [[MAX]] > opc_o0) ? [[MAX]] : opc_o0);
// CHECK-NEXT:      }
// CHECK-NEXT:      __syncthreads();
// CHECK:             opc_expf
// CHECK:           opc_red1_0[opc_t / 32] = [[SUM:v_[0-9]+]];
// CHECK:           __syncthreads();
// CHECK:           [[SUM]] = ([[SUM]] + opc_o0);
// CHECK:           __syncthreads();
// CHECK-NOT:       __syncthreads
// CHECK:             = ({{v_[0-9]+}} / [[SUM]]);
// CHECK-NOT:     __global__
// CHECK:         opc_k_softmax_long_0<<<4, 256>>>(x_0, out0_1);
