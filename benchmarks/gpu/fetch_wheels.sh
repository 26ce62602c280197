#!/usr/bin/env bash
# Downloads, here, the CPython 3.12 manylinux x86_64 wheels that the GPU machine lacks (issue 39) into
# .whl/ at the repo root (ignored through .git/info/exclude), for `run` with carry [".whl"].
# The machine's package list is ../.library/device/KINDS.md ("Python packages already there"): a
# requirement named there is not fetched. Versions are the ones tested here (pyproject.toml's notes).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir .whl

# textual 8.2.8 needs markdown-it-py[linkify], mdit-py-plugins, platformdirs, pygments>=2.19.2,
# rich>=14.2, typing-extensions; the machine has markdown-it-py, mdurl and typing-extensions, and rich
# and pygments of versions not known here: those two are carried too (the versions tested here), so
# that an old one there cannot fail the one run. linkify-it-py needs uc-micro-py. plotext and msgspec
# need nothing.
WANT=(textual==8.2.8 mdit-py-plugins==0.7.0 platformdirs==4.14.8 linkify-it-py==2.2.0 uc-micro-py==2.0.0
      rich==15.0.0 pygments==2.20.0 plotext==5.3.2 msgspec==0.22.0)
PLAT=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do PLAT+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLAT[@]}" -d .whl "${WANT[@]}"

# every wheel's requirements (extras left out) must be carried or already on the machine
ON_DEVICE="markdown-it-py mdurl typing-extensions"
status=0
for w in .whl/*.whl; do
    while read -r req; do
        name=$(echo "$req" | sed -E 's/^Requires-Dist: *([A-Za-z0-9_.-]+).*/\1/' | tr 'A-Z_.' 'a-z--')
        carried=$(ls .whl | sed -E 's/-[0-9].*//' | tr 'A-Z_.' 'a-z--')
        if ! grep -qxF "$name" <<<"$carried" && ! grep -qw -- "$name" <<<"$ON_DEVICE"; then
            echo "MISSING: $w needs $req"; status=1
        fi
    done < <(unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' || true)
done
ls -l .whl
du -cb .whl/*.whl | tail -1 | awk '{printf "total %.2f MiB\n", $1 / 1048576}'
exit $status
