#!/bin/sh
# Install.PkgConfig: builds a one-file program that includes every installed header with the
# flags `pkg-config --cflags --libs kvtier` gives for the install prefix, checks that it needs
# libkvtier by its versioned SONAME, and runs it; links and runs it against libkvtier.a too
# (`pkg-config --static --libs kvtier`).
# Usage: pkg_config_program.sh PREFIX LIBDIR WORK_DIR CXX SOVERSION [CXXFLAGS]
set -eu
prefix=$1 libdir=$2 work=$3 cxx=$4 soversion=$5 flags=${6:-}
rm -rf "$work"
mkdir -p "$work"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
cflags=$(pkg-config --cflags kvtier)
libs=$(pkg-config --libs kvtier)
pc_libdir=$(pkg-config --variable=libdir kvtier)
echo "pkg-config --cflags --libs kvtier: $cflags $libs"
program="$work/all_headers.cpp"
(cd "$prefix/include" && find kvtier -name '*.h' | LC_ALL=C sort | sed 's/.*/#include <&>/') >"$program"
headers=$(grep -c '^#include' "$program")
cat >>"$program" <<PROGRAM
#include <cstdio>
int main() {
  const kvtier::Config config;  // the defaults are valid: this runs code from libkvtier
  if (!config.validate()) return 1;
  std::printf("pkg-config program: ok ($headers installed headers)\n");
  return 0;
}
PROGRAM
# shellcheck disable=SC2086  # the flags are lists of words
"$cxx" -std=c++23 -Wall -Wextra -Wpedantic -Werror $flags $cflags -c "$program" -o "$work/program.o"
# shellcheck disable=SC2086
"$cxx" $flags "$work/program.o" -o "$work/program" $libs "-Wl,-rpath,$pc_libdir"
# The same object against libkvtier.a and the private libraries `--static` adds.
static_libs=$(pkg-config --static --libs kvtier | sed "s|-lkvtier\b|$pc_libdir/libkvtier.a|")
# shellcheck disable=SC2086
"$cxx" $flags "$work/program.o" -o "$work/program-static" $static_libs
"$work/program-static"
if ! readelf -d "$work/program" | grep -q "NEEDED.*\[libkvtier\.so\.$soversion\]"; then
  echo "pkg-config program does not need libkvtier.so.$soversion:"
  readelf -d "$work/program" | grep NEEDED
  exit 1
fi
"$work/program"
