# Shared by the CLI tests (sourced after `set -uo pipefail`): check and eventually, a temporary
# directory $dir removed at exit with the processes the test started (its $pid, or those it added
# to the array pids), and the closing summary.
fails=0; passes=0
check() {  # check NAME COMMAND...: passes when the command succeeds
  local name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
eventually() {  # eventually COMMAND...: retries for up to 10 s
  for _ in $(seq 100); do "$@" && return 0; sleep 0.1; done
  return 1
}
dir=$(mktemp -d)
pid=
pids=()
cleanup() {
  for p in ${pid:+"$pid"} "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
summary() {  # the last command of a test: prints the counts, fails if any check did
  echo "$passes passed, $fails failed"
  test "$fails" = 0
}
