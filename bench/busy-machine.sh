#!/usr/bin/env bash
# Normal decoding while other processes keep cores busy: `medusa bench` on the default model
# (normal mode, one stream) beside loops that keep 0, 0.5, 1 and 2 cores busy (LOADS, in
# cores; a half is a loop busy 10 ms of every 20), in three set-ups taken in
# turn within each round: every core's thread always (`--threads` = the core count, as before
# the thread cap), the default (threads follow the machine's load), and every core with
# OpenMP's passive waiting. Prints one line per bench and the median of each set-up per load.
#
#   bench/busy-machine.sh PROMPTS_FILE [ROUNDS] [TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
prompts=${1:?usage: bench/busy-machine.sh PROMPTS_FILE [ROUNDS] [TOKENS]}
rounds=${2:-3}
tokens=${3:-64}
medusa=${MEDUSA:-target/release/medusa}
cores=$(nproc)
results=$(mktemp)
loops=()
stop_loops() {
  [ ${#loops[@]} -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true
  loops=()
}
trap 'stop_loops; rm -f "$results"' EXIT

# OpenMP's wait policy (or "" for its default), then medusa bench's extra options.
tokens_per_second() {
  local wait_policy=$1
  shift
  env ${wait_policy:+OMP_WAIT_POLICY=$wait_policy} "$medusa" bench --no-heads --modes normal \
    --prompts "$prompts" -n "$tokens" --json "$@" 2>/dev/null |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["results"][0]["tokens_per_second"], 2))'
}

for busy in ${LOADS:-0 0.5 1 2}; do
  for ((i = 0; i < ${busy%.*}; i++)); do
    sh -c 'while :; do :; done' &
    loops+=($!)
  done
  if [ "${busy#*.}" != "$busy" ]; then
    python3 -c '
import time
while True:
    start = time.monotonic()
    while time.monotonic() - start < 0.01:
        pass
    time.sleep(0.01)' &
    loops+=($!)
  fi
  for round in $(seq "$rounds"); do
    every=$(tokens_per_second "" --threads "$cores")
    following=$(tokens_per_second "")
    passive=$(tokens_per_second passive --threads "$cores")
    for setup in every following passive; do
      echo "busy=$busy round=$round $setup ${!setup}" | tee -a "$results"
    done
  done
  stop_loops
done

python3 - "$results" <<'EOF'
import statistics, sys
from collections import defaultdict
figures = defaultdict(list)
for line in open(sys.argv[1]):
    busy, _, setup, tps = line.split()
    figures[(busy, setup)].append(float(tps))
print("\nmedian tok/s    every core    following load    every core, passive")
for busy in dict.fromkeys(b for b, _ in figures):
    row = [statistics.median(figures[(busy, s)]) for s in ("every", "following", "passive")]
    print(f"{busy:<15} {row[0]:>10.1f} {row[1]:>17.1f} {row[2]:>22.1f}")
EOF
