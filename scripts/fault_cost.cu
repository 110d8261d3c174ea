// What one GPU memory fault costs: the faulting process, the contexts beside it, and whether a
// second context of the same process survives it. Guard mode ends a worker at every read past
// a guard page (the context is dead); this measures what that costs outside kedge, with the
// driver API alone.
//
//   nvcc -O2 -o fault_cost scripts/fault_cost.cu -lcuda
//   ./fault_cost child fault|ok    one context: create, load, one kernel (reading an unmapped
//                                  address, or a mapped one), synchronize; prints the times
//   ./fault_cost bystander SECONDS one context launching a tiny kernel and synchronizing in a
//                                  loop; prints the latency distribution and the stalls
//   ./fault_cost twoctx            two contexts in one process: a fault in the first, then
//                                  work in the second, the first destroyed, a third created
//
// Every driver call's status is checked; a failure that is not the one measured exits 1.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry rd(.param .u64 src, .param .u64 dst) {
  .reg .u64 %a<3>;
  .reg .f32 %f<2>;
  ld.param.u64 %a1, [src];
  ld.param.u64 %a2, [dst];
  ld.global.f32 %f1, [%a1];
  st.global.f32 [%a2], %f1;
  ret;
}
)";

static double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

static const char* name_of(CUresult r) {
  const char* s = nullptr;
  if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == nullptr) return "unknown CUresult";
  return s;
}

// Check a call whose failure is not what is measured.
#define CHECK(call)                                                              \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                    \
      std::fprintf(stderr, "fault_cost: %s failed: %s (line %d)\n", #call,     \
                   name_of(r_), __LINE__);                                       \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

struct Ctx {
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction rd = nullptr;
  CUdeviceptr buf = 0;       // two floats: source and destination
  CUdeviceptr hole = 0;      // reserved address space, never mapped
  size_t hole_bytes = 2 << 20;
  double create_ms = 0, load_ms = 0;
};

static Ctx make_ctx(CUdevice dev) {
  Ctx c;
  double t = now_ms();
  CHECK(cuCtxCreate(&c.ctx, nullptr, 0, dev));
  c.create_ms = now_ms() - t;
  t = now_ms();
  CHECK(cuModuleLoadData(&c.mod, kPtx));
  CHECK(cuModuleGetFunction(&c.rd, c.mod, "rd"));
  CHECK(cuMemAlloc(&c.buf, 2 * sizeof(float)));
  CHECK(cuMemsetD32(c.buf, 0x3f800000u, 2));  // 1.0f: never zeros
  CHECK(cuMemAddressReserve(&c.hole, c.hole_bytes, 0, 0, 0));
  CHECK(cuCtxSynchronize());
  c.load_ms = now_ms() - t;
  return c;
}

// Launch `rd` reading `src` and synchronize; the launch's status is checked, the sync's is
// returned (the fault shows there).
static CUresult read_once(const Ctx& c, CUdeviceptr src) {
  CUdeviceptr dst = c.buf + sizeof(float);
  void* args[] = {&src, &dst};
  CUresult r = cuLaunchKernel(c.rd, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
  if (r != CUDA_SUCCESS) return r;
  return cuCtxSynchronize();
}

static CUdevice init_dev() {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  return dev;
}

static int child(bool fault) {
  double t0 = now_ms();
  CUdevice dev = init_dev();
  double init_ms = now_ms() - t0;
  Ctx c = make_ctx(dev);
  double t = now_ms();
  CUresult r = read_once(c, fault ? c.hole : c.buf);
  double run_ms = now_ms() - t;
  bool want = fault ? r == CUDA_ERROR_ILLEGAL_ADDRESS : r == CUDA_SUCCESS;
  t = now_ms();
  CUresult d = cuCtxDestroy(c.ctx);
  double destroy_ms = now_ms() - t;
  std::printf("%s init %.1f ms, context %.1f ms, load %.1f ms, run+sync %.1f ms (%s), "
              "destroy %.1f ms (%s), all %.1f ms\n",
              fault ? "fault" : "ok", init_ms, c.create_ms, c.load_ms, run_ms, name_of(r),
              destroy_ms, name_of(d), now_ms() - t0);
  return want ? 0 : 1;
}

static int bystander(double seconds) {
  CUdevice dev = init_dev();
  Ctx c = make_ctx(dev);
  std::vector<double> lat;
  double start = now_ms(), end = start + seconds * 1e3;
  std::vector<std::pair<double, double>> stalls;  // (at, ms)
  while (now_ms() < end) {
    double t = now_ms();
    CUresult r = read_once(c, c.buf);
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "fault_cost: bystander's kernel failed: %s\n", name_of(r));
      return 1;
    }
    double l = now_ms() - t;
    lat.push_back(l);
    if (l > 5.0) stalls.emplace_back(t - start, l);
  }
  std::vector<double> s = lat;
  std::sort(s.begin(), s.end());
  auto q = [&](double p) { return s[std::min(s.size() - 1, size_t(p * s.size()))]; };
  double stalled = 0;
  for (auto& st : stalls) stalled += st.second;
  std::printf("bystander: %zu launches in %.1f s; latency p50 %.3f ms, p99 %.3f ms, max %.1f ms; "
              "%zu stalls over 5 ms, %.0f ms in all\n",
              lat.size(), seconds, q(0.5), q(0.99), s.back(), stalls.size(), stalled);
  for (size_t i = 0; i < stalls.size() && i < 60; ++i)
    std::printf("  stall at %.0f ms: %.1f ms\n", stalls[i].first, stalls[i].second);
  CHECK(cuCtxDestroy(c.ctx));
  return 0;
}

static int twoctx() {
  CUdevice dev = init_dev();
  Ctx a = make_ctx(dev);
  Ctx b = make_ctx(dev);
  std::printf("contexts created: %.1f ms and %.1f ms\n", a.create_ms, b.create_ms);
  CHECK(cuCtxSetCurrent(a.ctx));
  CUresult fa = read_once(a, a.hole);
  std::printf("A: read of an unmapped address: %s\n", name_of(fa));
  CUresult again = read_once(a, a.buf);
  std::printf("A: a good read after it: %s\n", name_of(again));
  CHECK(cuCtxSetCurrent(b.ctx));
  CUresult fb = read_once(b, b.buf);
  std::printf("B: a good read after A's fault: %s\n", name_of(fb));
  double t = now_ms();
  CUresult da = cuCtxDestroy(a.ctx);
  std::printf("A destroyed: %s in %.1f ms\n", name_of(da), now_ms() - t);
  CHECK(cuCtxSetCurrent(b.ctx));
  CUresult fb2 = read_once(b, b.buf);
  std::printf("B: a good read after A is destroyed: %s\n", name_of(fb2));
  t = now_ms();
  CUcontext cc = nullptr;
  CUresult cr = cuCtxCreate(&cc, nullptr, 0, dev);
  std::printf("C created: %s in %.1f ms\n", name_of(cr), now_ms() - t);
  if (cr == CUDA_SUCCESS) {
    CUmodule m;
    CUresult lr = cuModuleLoadData(&m, kPtx);
    std::printf("C: module load: %s\n", name_of(lr));
    CHECK(cuCtxDestroy(cc));
  }
  CHECK(cuCtxDestroy(b.ctx));
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "child") == 0)
    return child(std::strcmp(argv[2], "fault") == 0);
  if (argc >= 3 && std::strcmp(argv[1], "bystander") == 0)
    return bystander(std::atof(argv[2]));
  if (argc >= 2 && std::strcmp(argv[1], "twoctx") == 0) return twoctx();
  std::fprintf(stderr,
               "usage: fault_cost child fault|ok | bystander SECONDS | twoctx\n");
  return 2;
}
