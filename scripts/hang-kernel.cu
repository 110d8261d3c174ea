// A user's kernel that never returns, with the published row-op ABI (harness/include/kedge.h):
// the device check runs it with a short --timeout, and the timeout's verdict must name the
// phase its worker was killed in (`run`, the impl's) and how long it had been there.
//
//   kedge run -o rms_norm --kernel scripts/hang-kernel.cu --entry hang_rms_norm \
//       --impl source:hang_rms_norm:clamped --ne 64,4 --timeout 5
//
// The loop reads a flag nothing ever sets, through a volatile pointer, so the compiler keeps it.

__device__ int kedge_never_set = 0;

extern "C" __global__ void hang_rms_norm(const float *x, float *dst, int ncols, long long nrows,
                                         long long nchannels, long long nsamples,
                                         long long stride_row, long long stride_channel,
                                         long long stride_sample, float eps) {
    volatile int *flag = &kedge_never_set;
    while (*flag == 0) {
        __nanosleep(1000);
    }
    dst[blockIdx.x] = x[blockIdx.x] + eps;
}
