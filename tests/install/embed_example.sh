#!/bin/sh
# Install.EmbedExample: configures examples/embed against the install prefix alone, builds it
# (warnings are errors: the installed headers must be clean for an embedder) and runs it.
# Usage: embed_example.sh EXAMPLE_DIR WORK_DIR PREFIX CMAKE MAKE_PROGRAM CXX [CXXFLAGS]
set -eu
example=$1 work=$2 prefix=$3 cmake=$4 make_program=$5 cxx=$6 flags=${7:-}
rm -rf "$work" "$work-static"
"$cmake" -S "$example" -B "$work" -G Ninja -DCMAKE_MAKE_PROGRAM="$make_program" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Wpedantic -Wno-missing-field-initializers $flags" \
  -DCMAKE_COMPILE_WARNING_AS_ERROR=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
# The package must have come from the prefix (not from a kvtier installed elsewhere).
found=$(sed -n 's/^kvtier_DIR:PATH=//p' "$work/CMakeCache.txt")
case "$found" in
  "$prefix"/*) ;;
  *) echo "embed example: find_package(kvtier) found '$found', not the prefix $prefix"; exit 1 ;;
esac
"$cmake" --build "$work"
"$work/kvtier_embed"
# The static package (COMPONENTS static) must configure too: its targets and the libraries it
# finds for them. (Install.PkgConfig links libkvtier.a.)
"$cmake" -S "$example" -B "$work-static" -G Ninja -DCMAKE_MAKE_PROGRAM="$make_program" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DKVTIER_EMBED_TARGET=kvtier::kvtier_static >/dev/null
