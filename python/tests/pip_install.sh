#!/bin/sh
# python.pip_install: `pip install .` as a user runs it, with Debian's packages only and no
# download: a copy of the source tree without its build directories (as a fresh clone has it),
# installed with --no-build-isolation into a fresh virtual environment that sees Debian's
# packages (--system-site-packages: setuptools, wheel, pip, torch). Then, from outside the
# source tree and without PYTHONPATH, the venv's python imports kvtier from the venv, finds its
# type stub beside it, and makes a few calls.
# A full CMake build of the module's targets (minutes on two cores): runs only with
# PIP_INSTALL_TEST=1, and exits 77 (skipped) otherwise.
# Usage: pip_install.sh SOURCE_DIR WORK_DIR PYTHON VERSION
set -eu
src=$1 work=$2 python=$3 version=$4
if [ "${PIP_INSTALL_TEST:-}" != 1 ]; then
  echo "python.pip_install: skipped (set PIP_INSTALL_TEST=1 to build and install the module with pip)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/src"
tar -C "$src" --exclude=./.git --exclude='./build*' --exclude=./.cache --exclude=./kvtier.egg-info \
  -cf - . | tar -C "$work/src" -xf -
"$python" -m venv --system-site-packages --without-pip "$work/venv"
start=$(date +%s)
"$work/venv/bin/python" -m pip install --no-build-isolation --no-deps --no-index "$work/src"
echo "python.pip_install: pip install took $(($(date +%s) - start)) s"
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" - "$work/venv" "$version" <<'PY'
import os, sys
import kvtier

venv, version = sys.argv[1], sys.argv[2]
where = os.path.realpath(kvtier.__file__)
assert where.startswith(os.path.realpath(venv) + os.sep), f"kvtier imported from {where}"
assert os.path.isfile(os.path.join(os.path.dirname(where), "kvtier.pyi")), "no kvtier.pyi beside it"
assert kvtier.__version__ == version, (kvtier.__version__, version)
config = kvtier.Config().with_overrides(["layout.layers=2", "layout.kv_heads=1",
                                         "layout.head_dim=8", "layout.dtype_bytes=4",
                                         "layout.blocks_per_chunk=2", "cache.host_bytes=1MiB"])
assert config.layout.kv_cache_shape(4) == (4, 2, 16, 1, 8), config.layout.kv_cache_shape(4)
assert len(kvtier.chunk_keys(config.layout, list(range(40)), model="m")) == 1
scheduler = kvtier.Scheduler(config, model="m")
assert scheduler.get_num_new_matched_tokens("r", list(range(40)), 0) == (0, False)
try:
    kvtier.Config().with_overrides(["cache.mode=nonsense"])
    raise AssertionError("a bad override was accepted")
except kvtier.Error as e:
    assert e.code == "invalid_argument", e.code
print(f"python.pip_install: kvtier {kvtier.__version__} from {where}: ok")
PY
