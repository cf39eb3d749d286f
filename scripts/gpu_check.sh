#!/usr/bin/env bash
# GPU check: install jaxid from this tree (no network), then device check, simulation
# throughput (10^4 … 10^6 trajectories) and a 100 000-trial study, one JSON of figures out.
#
#   bash scripts/gpu_check.sh [--out FILE] [--budget SECONDS] [--cpu] [--install|--no-install]
#
# The JSON goes to --out, else to $OUT/gpu_check.json when $OUT is set, else ./gpu_check.json;
# it is rewritten after every stage, so a run cut short still leaves its figures. --budget
# (default 360 s; --cpu 150 s) bounds the stages; compile time is reported apart from run time.
# --cpu runs the same stages on the CPU platform with small sizes (tests/test_gpu_check.py).
# The install (pip install --no-deps -e ., no index, no build isolation) is done by default
# except with --cpu; whatever it does, the tree's jaxid is first on PYTHONPATH.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
INSTALL=auto
ARGS=()
for arg in "$@"; do
  case "$arg" in
    --install) INSTALL=1 ;;
    --no-install) INSTALL=0 ;;
    --cpu) ARGS+=("$arg"); [ "$INSTALL" = auto ] && INSTALL=0 ;;
    *) ARGS+=("$arg") ;;
  esac
done
[ "$INSTALL" = auto ] && INSTALL=1
if [ "$INSTALL" = 1 ]; then
  echo "[gpu_check] pip install --no-deps -e $REPO"
  timeout 180 "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e "$REPO" \
    || echo "[gpu_check] pip install failed; using the tree through PYTHONPATH"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO" || exit 1
exec "$PY" "$REPO/scripts/gpu_check.py" "${ARGS[@]}"
