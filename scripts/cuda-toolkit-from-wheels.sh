#!/usr/bin/env bash
# A CUDA 13.0 toolkit for building ggml's CUDA backend on a machine with no CUDA install and no
# GPU (a build box or CI runner that carries the build to the GPU box), made from NVIDIA's Python
# wheels: nvcc, nvvm and crt of one release, the runtime, CCCL (cub, thrust) and cuBLAS, laid out
# as CMake's FindCUDAToolkit expects, with a link-only libcuda (every driver entry point of
# cuda.h, no body: the program loads the real driver where it runs).
#
#   scripts/cuda-toolkit-from-wheels.sh DIR [--wheels WHEELDIR]
#
#   DIR                 where the toolkit goes (DIR/bin/nvcc, DIR/include, DIR/lib)
#   --wheels WHEELDIR   use the wheels already in WHEELDIR (pip download fills it otherwise)
#
# Then build with it:
#   export PATH=DIR/bin:$PATH CUDACXX=DIR/bin/nvcc CUDAToolkit_ROOT=DIR \
#          LD_LIBRARY_PATH=DIR/lib:DIR/lib/stubs
#   scripts/build-ggml.sh --cuda OUTDIR
#
# Why: nvcc, ptxas and nvvm must be of one release (a newer nvvm writes PTX the older ptxas
# refuses), and the wheels split the toolkit in parts pip does not pin together.
# Exit status: 0 ok; 1 a download or a check failed; 2 usage.
set -euo pipefail
usage() { sed -n '2,20p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
DIR=$1; shift
WHEELS=""
while [ $# -gt 0 ]; do
  case $1 in
    --wheels) WHEELS=${2:?--wheels needs a directory}; shift 2 ;;
    *) usage ;;
  esac
done
PKGS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
      nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 "nvidia-cublas==13.1.*")
if [ -z "$WHEELS" ]; then
  WHEELS=$(mktemp -d)
  python3 -m pip download --no-deps -q -d "$WHEELS" "${PKGS[@]}" \
    || { echo "cuda-toolkit-from-wheels.sh: pip could not download ${PKGS[*]}" >&2; exit 1; }
fi
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
for p in "${PKGS[@]}"; do
  name=${p%%==*}; name=${name//-/_}
  w=$(ls "$WHEELS"/"$name"-*.whl 2>/dev/null | head -n1)
  [ -n "$w" ] || { echo "cuda-toolkit-from-wheels.sh: no wheel for $p in $WHEELS" >&2; exit 1; }
  python3 -m zipfile -e "$w" "$STAGE"
done
ROOT="$STAGE/nvidia/cu13"
[ -f "$ROOT/bin/nvcc" ] || { echo "cuda-toolkit-from-wheels.sh: the wheels hold no nvidia/cu13/bin/nvcc" >&2; exit 1; }
mkdir -p "$DIR"
cp -a "$ROOT"/. "$DIR"/
# Zip archives keep no file modes.
chmod +x "$DIR"/bin/* "$DIR"/nvvm/bin/*
# nvcc.profile looks for targets/x86_64-linux/{include,lib}; CMake for lib64 and lib/stubs.
mkdir -p "$DIR/targets/x86_64-linux" "$DIR/lib/stubs"
ln -sfn ../../include "$DIR/targets/x86_64-linux/include"
ln -sfn ../../lib "$DIR/targets/x86_64-linux/lib"
ln -sfn lib "$DIR/lib64"
for l in libcudart libcublas libcublasLt; do
  f=$(ls "$DIR"/lib/$l.so.* 2>/dev/null | head -n1)
  [ -n "$f" ] && ln -sfn "$(basename "$f")" "$DIR/lib/$l.so"
done
# The link-only libcuda: the driver API's names from cuda.h (versioned ones through its #defines).
python3 - "$DIR/include/cuda.h" > "$STAGE/cuda-stub.c" <<'PY'
import re, sys
h = open(sys.argv[1]).read()
names = set(re.findall(r'\b(cu[A-Z][A-Za-z0-9_]*)\s*\(', h))
names |= set(re.findall(r'#define\s+cu[A-Za-z0-9_]+\s+(cu[A-Za-z0-9_]+)', h))
for n in sorted(x for x in names if not x.startswith("cuda")):
    print(f"void {n}(void) {{}}")
PY
cc -shared -fPIC -o "$DIR/lib/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 "$STAGE/cuda-stub.c"
ln -sfn libcuda.so "$DIR/lib/stubs/libcuda.so.1"
# A check: one kernel compiled and linked for sm_90.
printf '__global__ void k(float *x) { x[threadIdx.x] *= 2; }\nint main() { float *d; cudaMalloc(&d, 4); k<<<1, 1>>>(d); return (int)cudaDeviceSynchronize(); }\n' > "$STAGE/t.cu"
if ! PATH="$DIR/bin:$PATH" nvcc -arch=sm_90 -o "$STAGE/t" "$STAGE/t.cu" > "$STAGE/check.log" 2>&1; then
  cat "$STAGE/check.log" >&2
  echo "cuda-toolkit-from-wheels.sh: nvcc could not build a kernel with $DIR" >&2
  exit 1
fi
echo "cuda-toolkit-from-wheels.sh: CUDA $(PATH="$DIR/bin:$PATH" nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') in $DIR"
echo "  export PATH=$DIR/bin:\$PATH CUDACXX=$DIR/bin/nvcc CUDAToolkit_ROOT=$DIR LD_LIBRARY_PATH=$DIR/lib:$DIR/lib/stubs"
