# tests/support/h5same.sh — sourced by the sharding/MPI tests:
#   h5same A.h5 B.h5   exit 0 when /responses, /summary and /cells of two
#                      results files are identical: every dataset and
#                      attribute compared by h5diff (exact: no tolerance),
#                      and every numeric dataset also byte for byte (h5dump
#                      -b), so that -0.0 / NaN payloads cannot hide.
h5same() {
  local a=$1 b=$2 g d
  for g in /responses /summary /cells; do
    # names and shapes (h5diff alone calls datasets of other shapes "not
    # comparable" and may still exit 0)
    [ "$(h5ls "$a$g")" = "$(h5ls "$b$g")" ] || { echo "h5same: $g: other datasets or shapes ($a vs $b)" >&2; return 1; }
    h5diff -q "$a" "$b" "$g" "$g" >/dev/null 2>&1 || { echo "h5same: $g differs ($a vs $b)" >&2; return 1; }
    for d in $(h5ls "$a$g" | awk '{print $1}'); do
      rm -f "$work/x.bin" "$work/y.bin"
      h5dump -d "$g/$d" -b LE -o "$work/x.bin" "$a" >/dev/null 2>&1
      h5dump -d "$g/$d" -b LE -o "$work/y.bin" "$b" >/dev/null 2>&1
      cmp -s "$work/x.bin" "$work/y.bin" || { echo "h5same: $g/$d bytes differ" >&2; return 1; }
    done
  done
}
