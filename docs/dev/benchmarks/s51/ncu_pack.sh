#!/usr/bin/env bash
# Why packed tiles lose at 16k with ALiBi and FP8 but not plain (perf-log, "Fifty-first session"): ncu of the
# attention kernel (kg_attention_fwd) at gpt-oss's heads, one causal request of 16k, plain / built-in ALiBi /
# FP8 q, K and V, packed (KERNELGEN_SM90_PACK_GQA=1) and unpacked (0): duration, SM and tensor-pipe
# throughput, warp states, and the SMs' active-cycle spread (max / min / avg: the schedule's tail).
# No carry; about 120 s.  Kernel replay is fine here: the K / V of one 16k request (32 MB bf16) stay in L2.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
M=gpu__time_duration.sum,sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active
for S in gptoss_causal_16k gptoss_alibi_16k fp8_gptoss_16k; do
  for P in 1 0; do
    KERNELGEN_SM90_PACK_GQA=$P timeout 90 ncu --profile-from-start off --clock-control none --kernel-name kg_attention_fwd \
      --metrics $M --section SpeedOfLight --section WarpStateStats --csv --page details \
      python3 benchmarks/experiments/profile_vs_peers.py --impl kernelgen --shapes $S > $W/ncu_${S}_p$P.csv 2> $W/ncu_${S}_p$P.err
    echo "$S pack=$P rc $? at $SECONDS" >> $W/rc.txt
  done
done
cat $W/rc.txt
for f in $W/ncu_*.csv; do echo "== $f"; grep -E "gpu__time_duration|sm__cycles_active|hmma|inst_executed.sum|hit_rate|Stall Long|Stall Wait|Stall Barrier|Stall Math" $f | cut -d, -f12- | head -14; done
cd $OUT && tar -czf w.tgz w
