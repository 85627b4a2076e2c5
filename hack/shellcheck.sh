#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# make lint: shellcheck on every shell script of the checkout, tracked or new (what git
# would ship): files ending in .sh and files whose first line is a bash or sh shebang
# (.ci/run). Sourced files are followed (-x) from the checkout's root, as the scripts'
# "# shellcheck source=" lines name them.
#
# It needs shellcheck and never skips it: without it this fails and says how to install it.
# .ci/run installs it (Debian's package) when it runs as root and it is missing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

if ! command -v shellcheck >/dev/null 2>&1; then
  cat >&2 <<'EOF'
lint: shellcheck is not installed, and make lint needs it. Install it from the distribution:
  Debian, Ubuntu:  sudo apt-get install shellcheck
  Fedora, RHEL:    sudo dnf install ShellCheck
  macOS:           brew install shellcheck
(.ci/run installs it itself when it runs as root.)
EOF
  exit 1
fi

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t candidates < <(git ls-files --cached --others --exclude-standard)
else
  mapfile -t candidates < <(find . \( -name .git -o -name .venv -o -name .build -o -name .cache \) -prune \
    -o -type f -print | sed 's|^\./||')
fi

scripts=()
for file in "${candidates[@]}"; do
  [[ -f $file && ! -L $file ]] || continue  # deleted in the work tree, or a link
  if [[ $file == *.sh ]]; then
    scripts+=("$file")
  else
    read -r first <"$file" 2>/dev/null || true
    if [[ ${first:-} =~ ^\#!(/usr/bin/env[[:space:]]+)?(/usr)?(/bin/)?(ba)?sh([[:space:]]|$) ]]; then
      scripts+=("$file")
    fi
    first=
  fi
done

if ((${#scripts[@]} == 0)); then
  echo "shellcheck: no shell script found" >&2
  exit 1
fi
echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p'): ${#scripts[@]} scripts"
exec shellcheck -x "${scripts[@]}"
