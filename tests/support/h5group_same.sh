# tests/support/h5group_same.sh — sourced by the operator shard tests:
#   h5group_same A.h5 B.h5 GROUP   exit 0 when GROUP of two results files is
#       the same: the same datasets and shapes (h5ls), every numeric dataset
#       byte for byte (h5dump -b LE, so -0.0 and NaN payloads count), string
#       datasets in h5dump's text, with the same
#       attributes, and every attribute of GROUP equal in h5dump's exact text
#       (reals as C99 hex, -m %a) except the run's own provenance:
#       command_line, created_utc, elapsed_s, threads, and the names in
#       H5GROUP_SKIP (space separated; e.g. engine_device, whose text names
#       the rule that chose the device).
h5group_same() {
  local a=$1 b=$2 g=$3 d n skip=" command_line created_utc elapsed_s threads ${H5GROUP_SKIP:-} "
  [ "$(h5ls "$a/$g")" = "$(h5ls "$b/$g")" ] || { echo "h5group_same: /$g: other datasets or shapes ($a vs $b)" >&2; return 1; }
  for d in $(h5ls "$a/$g" | awk '{print $1}'); do
    rm -f "$work/x.bin" "$work/y.bin"
    h5dump -d "/$g/$d" -b LE -o "$work/x.bin" "$a" >/dev/null 2>&1
    h5dump -d "/$g/$d" -b LE -o "$work/y.bin" "$b" >/dev/null 2>&1
    if [ -s "$work/x.bin" ]; then
      cmp -s "$work/x.bin" "$work/y.bin" || { echo "h5group_same: /$g/$d bytes differ" >&2; return 1; }
    else # strings (variable length: no binary dump): the exact text
      [ "$(h5dump -d "/$g/$d" "$a" | tail -n +2)" = "$(h5dump -d "/$g/$d" "$b" | tail -n +2)" ] &&
        [ -n "$(h5dump -d "/$g/$d" "$a" | grep DATA)" ] || { echo "h5group_same: /$g/$d differs" >&2; return 1; }
    fi
    [ "$(h5dump -A -d "/$g/$d" "$a" | tail -n +2)" = "$(h5dump -A -d "/$g/$d" "$b" | tail -n +2)" ] ||
      { echo "h5group_same: /$g/$d: attributes differ" >&2; return 1; }
  done
  local na nb
  na=$(h5dump -A -g "/$g" "$a" | grep -o 'ATTRIBUTE "[^"]*"' | sed 's/ATTRIBUTE "//; s/"$//' | sort)
  nb=$(h5dump -A -g "/$g" "$b" | grep -o 'ATTRIBUTE "[^"]*"' | sed 's/ATTRIBUTE "//; s/"$//' | sort)
  [ "$na" = "$nb" ] || { echo "h5group_same: /$g: other attribute names" >&2; return 1; }
  [ -n "$na" ] || { echo "h5group_same: /$g: no attributes" >&2; return 1; }
  for n in $na; do
    case "$skip" in *" $n "*) continue ;; esac
    [ "$(h5dump -m %a -a "/$g/$n" "$a" | tail -n +2)" = "$(h5dump -m %a -a "/$g/$n" "$b" | tail -n +2)" ] ||
      { echo "h5group_same: /$g attribute $n differs" >&2; return 1; }
  done
}
