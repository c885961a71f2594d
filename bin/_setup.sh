# Sourced by the other bin/ scripts: makes sure .venv exists and holds this checkout.
# Installs on first use, and again whenever what the install builds from changes
# (pyproject.toml, setup.py, the compiled loops' source) or other extras are asked.

PONG_MP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PONG_MP_VENV:-$PONG_MP_ROOT/.venv}"

_find_python() {
    local candidate
    for candidate in "${PONG_MP_PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# _requirements [EXTRAS]: pong-mp's dependencies and its EXTRAS' (pyproject.toml), one a
# line; an extra that names others (dev = pong-mp[test,ray]) brings theirs.
_requirements() {
    "$VENV/bin/python" - "$PONG_MP_ROOT/pyproject.toml" "${1:-}" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
wanted, done, out = set(filter(None, sys.argv[2].split(","))), set(), list(project["dependencies"])
while wanted - done:
    extra = min(wanted - done)
    done.add(extra)
    for requirement in project["optional-dependencies"][extra]:
        own = re.fullmatch(r"pong-mp\[(.*)\]", requirement)
        if own:
            wanted |= set(own.group(1).split(","))
        else:
            out.append(requirement)
print("\n".join(out))
PY
}

# ensure_venv [EXTRAS]: e.g. ensure_venv test
ensure_venv() {
    local extras="${1:-}" stamp want python
    stamp="$VENV/.pong-mp-installed"
    want="$(cat "$PONG_MP_ROOT"/{pyproject.toml,setup.py,pong_mp/sparse.pyx} | sha256sum |
            cut -c1-16) ${extras:-base}"
    if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && grep -qxF "$want" "$stamp"; then
        return 0
    fi
    python="$(_find_python)" || {
        echo "pong-mp: error: Python >= 3.11 is needed (set PONG_MP_PYTHON to its path)" >&2
        exit 1
    }
    echo "pong-mp: setting up $VENV with $($python --version) (first run only, ~1 min)" >&2
    [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
    # pong-mp's build (Cython, then the C compiler on every core) and its dependencies'
    # install (pip resolving and unpacking, mostly on one core) go side by side: pip cannot
    # install only a project's dependencies, so _requirements lists them for a second pip.
    # The build's tools (setuptools, Cython) stay in pip's build environment, not here.
    # What is installed is byte-compiled (Ray's alone takes half a minute): left to first
    # import, it would be compiled again in every process where PYTHONDONTWRITEBYTECODE is
    # set. compileall does it on every core, where pip's own would take one. It skips the
    # parts of Ray that pong-mp never imports (RLlib, Data, Tune, Train, LLM, AIR) and pip:
    # a quarter of the source, and of the time.
    local pip=("$VENV/bin/python" -m pip install --quiet --no-compile) build listed line
    local needs=()
    listed="$(_requirements "$extras")" || exit 1
    while IFS= read -r line; do needs+=("$line"); done <<<"$listed"
    if ! { "$VENV/bin/python" -m pip install --quiet --upgrade pip &&
           { "${pip[@]}" --no-deps -e "$PONG_MP_ROOT" & build=$!
             "${pip[@]}" "${needs[@]}" || { wait "$build"; false; }; } &&
           wait "$build" &&
           { "$VENV/bin/python" -m compileall -q -j 0 \
                 -x '/ray/(rllib|data|tune|train|llm|air)/|/site-packages/pip/' \
                 "$("$VENV/bin/python" -c \
                 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true; }
         } >"$VENV/install.log" 2>&1
    then
        tail -n 20 "$VENV/install.log" >&2
        echo "pong-mp: error: installing into $VENV failed (full log: $VENV/install.log)" >&2
        exit 1
    fi
    compile_sources pong_mp
    # Several lines: a venv with test extras also satisfies the plain command.
    { echo "$want"; [ -z "$extras" ] || echo "${want% *} base"; } >"$stamp"
}

# compile_sources DIR...: byte-compiles this checkout's Python files where they changed. The
# editable install leaves them to first import, where PYTHONDONTWRITEBYTECODE (set in many
# CI and container images) has every process compile them again: a tenth of a second for
# each command and each worker it starts. Python reads the compiled files whatever that
# says, and compiles any source edited since in memory, as before. Best effort: a file that
# does not compile, or a read-only checkout, is for the run itself to report.
compile_sources() {
    (cd "$PONG_MP_ROOT" && "$VENV/bin/python" -m compileall -q "$@" >/dev/null 2>&1) || true
}
