# Shared by scripts/test and scripts/chat: find a usable Python 3.11/3.12 and make .venv.

pick_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3 python3.12 python3.11; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    # a version-manager shim may exist without a working interpreter behind it: run it
    if "$candidate" -c 'import sys, venv; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 12) else 1)' \
        >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  echo "Panager needs Python 3.11 or 3.12 (set PYTHON=/path/to/python3.12)." >&2
  return 1
}

ensure_chromium() {
  # The web page's browser tests drive Debian's Chromium through Playwright.
  [ -x /usr/bin/chromium ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Chromium for the browser tests (apt-get install chromium)..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "Chromium is missing; install it (e.g. sudo apt-get install chromium) for the browser tests." >&2
  fi
}

ensure_venv() {
  # $1: the extras to install, e.g. ".[dev]" or "."
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
    local python
    python="$(pick_python)" || exit 1
    rm -rf .venv
    "$python" -m venv .venv
  fi
  # Nothing to install when pyproject.toml and the extras are what the last install used
  # (the install is editable: changes under src/ need none).
  local stamp
  stamp="$(cat pyproject.toml <(echo "$1") | cksum | cut -d' ' -f1)"
  if [ "$(cat .venv/.panager-installed 2>/dev/null)" = "$stamp" ] \
      && .venv/bin/python -c 'import panager' >/dev/null 2>&1; then
    return 0
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$1" 2>&1 \
    | grep -v "^WARNING: Location" || true
  .venv/bin/python -c 'import panager' 2>/dev/null || {
    echo "Installing Panager into .venv failed; run: .venv/bin/pip install -e '$1'" >&2
    exit 1
  }
  echo "$stamp" > .venv/.panager-installed
}
