# Sourced by the s50 device scripts: ab NAME ARGS... runs pack_gqa_ab.py (three passes, $AB_FLAGS before
# ARGS) into $W/NAME.json / .log while the call has time ($AB_UNTIL seconds, default 520) and appends
# its packed / unpacked ratios to $W/rc.txt.
ab() {
  local n=$1; shift
  [ $SECONDS -lt ${AB_UNTIL:-520} ] || return
  timeout 45 python3 benchmarks/experiments/pack_gqa_ab.py ${AB_FLAGS:-} --passes 3 --json $W/$n.json "$@" > $W/$n.log 2>&1
  echo "$n rc $? at $SECONDS: $(grep -o '"packed_over_unpacked": [0-9.]*' $W/$n.log | cut -d' ' -f2 | tr '\n' ' ')" >> $W/rc.txt
}
