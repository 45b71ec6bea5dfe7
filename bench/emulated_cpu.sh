#!/usr/bin/env bash
# Run a command as on a slower or older CPU of the kinds tfm meets, on a machine that has a newer
# one (Linux, as root: a mount namespace and a cgroup). How docs/BENCHMARKS.md ("The test
# suite") measured the suite for machines that were not at hand.
#
#   sudo bash bench/emulated_cpu.sh KIND CORES COMMAND...
#   sudo bash bench/emulated_cpu.sh avx2 1.2 .venv/bin/python -m pytest -q
#
# KIND   avx2:   no AVX-512 and no AMX (an AMD EPYC with AVX2 only): /proc/cpuinfo without their
#                flags (what --precision auto reads), torch, oneDNN and MKL held to AVX2.
#        avx512: AVX-512 without AVX-512 BF16, FP16 or AMX (an Intel Xeon without AMX).
#        native: this CPU's kernels and flags (only CORES applies).
# CORES  the CPU time the command may use, in cores (a CFS quota: 1.2 of 2 cores is "60% of
#        the machine"), or "all". A quota throttles harder than a slower clock does
#        (docs/BENCHMARKS.md, "The test suite").
#
# What this cannot emulate: another microarchitecture's cache sizes and instruction timings,
# and CTranslate2, which picks its kernels from CPUID (CT2_FORCE_CPU_ISA=AVX2 is set for avx2).
set -euo pipefail
kind=${1:?usage: emulated_cpu.sh avx2|avx512|native CORES|all COMMAND...}
cores=${2:?usage: emulated_cpu.sh avx2|avx512|native CORES|all COMMAND...}
shift 2
[ $# -gt 0 ] || { echo "error: no command given" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "error: needs root (a mount namespace and a cgroup)" >&2; exit 2; }

case $kind in
    avx2) hidden='avx512[a-z0-9_]*|amx_[a-z0-9]*'
          isa=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
               CT2_FORCE_CPU_ISA=AVX2) ;;
    avx512) hidden='avx512_bf16|avx512_fp16|amx_[a-z0-9]*'
            isa=(ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI
                 MKL_ENABLE_INSTRUCTIONS=AVX512) ;;
    native) hidden=''; isa=() ;;
    *) echo "error: KIND is avx2, avx512 or native, not '$kind'" >&2; exit 2 ;;
esac

work=$(mktemp -d)
group=""
cleanup() {
    if [ -n "$group" ] && [ -d "$group" ]; then
        # This shell leaves the group (to its parent) so that it can be removed.
        echo $$ > "$(dirname "$group")/cgroup.procs" 2>/dev/null || true
        rmdir "$group" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

if [ "$cores" != all ]; then
    quota=$(python3 -c 'import sys; print(round(float(sys.argv[1]) * 100000))' "$cores")
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # cgroup v2
        echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
        group=/sys/fs/cgroup/tfm-emulated-$$
        mkdir "$group"
        echo "$quota 100000" > "$group/cpu.max"
    else  # cgroup v1
        group=/sys/fs/cgroup/cpu/tfm-emulated-$$
        mkdir "$group"
        echo 100000 > "$group/cpu.cfs_period_us"
        echo "$quota" > "$group/cpu.cfs_quota_us"
    fi
    echo $$ > "$group/cgroup.procs"  # and every process started from here on
fi

cpuinfo=/proc/cpuinfo
if [ -n "$hidden" ]; then
    cpuinfo=$work/cpuinfo
    sed -E "s/ ($hidden)\b//g" /proc/cpuinfo > "$cpuinfo"
fi
echo "emulated: $kind, ${cores} cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" >&2
# (Its exit status is the script's; the EXIT trap removes the group after it.)
env "${isa[@]}" unshare -m bash -c 'mount --bind "$0" /proc/cpuinfo && exec "$@"' "$cpuinfo" "$@"
