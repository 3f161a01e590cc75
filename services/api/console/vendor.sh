#!/usr/bin/env bash
# Rebuilds vendor/ from the npm packages pinned in package.json and package-lock.json, beside this
# script: `bash services/api/console/vendor.sh`. Each package's files to ship are listed under
# "vendor" in package.json; they are copied byte for byte (with the package's LICENSE, NOTICE and
# package.json, which records its version) into vendor/<package>/. Nothing is edited or built.
#
# `npm ci` installs exactly what the lockfile names, and checks each tarball's integrity hash.
# --ignore-scripts: swagger-ui-dist depends on @scarf/scarf, whose install script reports the
# install to a third party; no install script runs here (and SCARF_ANALYTICS=false says so too).
# To move to a new version: change the pin in package.json, run
#   npm install --package-lock-only --ignore-scripts
# in a copy of this folder to refresh package-lock.json, then run this script and the tests
# (tests/console/test_vendored.py compares every vendored file with the pinned package).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cp "$here/package.json" "$here/package-lock.json" "$work/"
(cd "$work" && SCARF_ANALYTICS=false npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)

# "<package> <file>" lines from package.json's "vendor" table.
node -e '
  const vendor = require(process.argv[1]).vendor;
  for (const [pkg, files] of Object.entries(vendor)) for (const f of files) console.log(pkg + " " + f);
' "$here/package.json" >"$work/files.txt"

rm -rf "$here/vendor"
while read -r pkg file; do
  mkdir -p "$here/vendor/$pkg"
  cp "$work/node_modules/$pkg/$file" "$here/vendor/$pkg/$file"
done <"$work/files.txt"
chmod -R u=rwX,go=rX "$here/vendor"
echo "vendored into $here/vendor:"
(cd "$here/vendor" && find . -type f | sort)
