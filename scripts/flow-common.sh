# shellcheck shell=bash disable=SC2034  # sets variables for the script that sources it
# Sourced by the flow-control scripts that build on scripts/flow-control.sh's runs
# (flow-deadlines.sh, flow-saturation.sh, flow-isolation.sh). Sets, from the environment:
#   bin       PREFIX_ROUTER (default build/release/src/prefix-router), checked to exist
#   flow_out  FLOW_OUT (default proof-results/flow-control)
#   jobs      FLOW_JOBS (default: one per core)
#   strategy  the gateway's default strategy, as `simulate --help` names it
#   ceiling   the knee ceiling that flow-control.sh chose (read from its knee runs in $flow_out)
# Exits with a message when the binary or the knee runs are missing.
bin=${PREFIX_ROUTER:-build/release/src/prefix-router}
flow_out=${FLOW_OUT:-proof-results/flow-control}
jobs=${FLOW_JOBS:-$(nproc)}
[[ -x "$bin" ]] || { echo "no $bin: run scripts/build.sh release first" >&2; exit 1; }
strategy=$("$bin" simulate --help | grep -o '[a-z-]* is the gateway.s default strategy' | cut -d' ' -f1)
[[ -n "$strategy" ]] || { echo "could not read the default strategy from simulate --help" >&2; exit 1; }
ceiling=$(python3 scripts/flow_control_tables.py "$flow_out" --knee)
