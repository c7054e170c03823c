#!/usr/bin/env bash
# The dashboard's JavaScript (src/dashboard/*.js) type-checked by TypeScript from its JSDoc
# types: strict, no emit, the browser's DOM library (tsconfig.json next to this file).
# TypeScript comes from the npm registry, pinned to one version; run by tests/run-all.sh.
set -euo pipefail
cd "$(dirname "$0")"
TYPESCRIPT=typescript@5.9.3
if ! command -v node >/dev/null 2>&1 || ! command -v npx >/dev/null 2>&1; then
  echo "SKIP: dashboard type check: node and npm are not installed (apt-get install nodejs npm)"
  exit 0
fi
npx --yes --package "$TYPESCRIPT" -- tsc --project tsconfig.json
echo "dashboard type check ($TYPESCRIPT): no errors"
