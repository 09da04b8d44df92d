#!/usr/bin/env bash
# Fails when nbdev_clean or nbdev_export would change the tree (works on a clean clone and on a dirty work tree).
set -euo pipefail
snapshot() {
  { git diff HEAD --binary; git ls-files -o --exclude-standard -z | xargs -0 -r sha256sum; } | sha256sum
}
before=$(snapshot)
nbdev_clean >/dev/null
nbdev_clean --fname evals >/dev/null
nbdev_export >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "FAIL: nbdev_clean / nbdev_export changed files. Run 'make export clean-nbs' and commit the result:" >&2
  git status --porcelain >&2
  exit 1
fi
echo "sync ok: nbdev_clean and nbdev_export leave the tree unchanged"
