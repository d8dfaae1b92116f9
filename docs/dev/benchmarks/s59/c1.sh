#!/usr/bin/env bash
# Fifty-ninth session, a device try (carry [".peers/manifest.json", ".peers/part1"]).
# On an H200: stash the peers' part 1 (rc 3 expected) for s58/c2.sh.  On anything else (an H100): the
# fifty-first session's unrun ncu question for issue 24's d 64 FP8 row (s51/ncu_pack.sh, FP8 and plain
# only): why gpt-oss's causal 16k call loses 1-4 % packed on the FP8 tensor-core tile while the plain one
# gains; about 100 s, results in $OUT/w.
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"; exit 0
fi
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
M=gpu__time_duration.sum,sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,smsp__inst_executed_pipe_xu.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
for S in fp8_gptoss_16k gptoss_causal_16k; do
  for P in 1 0; do
    KERNELGEN_SM90_PACK_GQA=$P timeout 80 ncu --profile-from-start off --clock-control none --kernel-name kg_attention_fwd \
      --metrics $M --section SpeedOfLight --section WarpStateStats --csv --page details \
      python3 benchmarks/experiments/profile_vs_peers.py --impl kernelgen --shapes $S > $W/ncu_${S}_p$P.csv 2> $W/ncu_${S}_p$P.err
    echo "$S pack=$P rc $? at $SECONDS" >> $W/rc.txt
  done
done
cat $W/rc.txt
for f in $W/ncu_*.csv; do echo "== $f"; grep -E "gpu__time_duration|sm__cycles_active|hmma|inst_executed|hit_rate|grid_size|registers|bank_conflicts|Stall" $f | cut -d, -f12- | head -24; done
cd $OUT && tar -czf w.tgz w
