#!/bin/sh
# scripts/commit-id.sh ROOT — the commit that qmla's results files record
# (lib/meson.build's vcs_tag): the first line of ROOT/.qmla-commit where a
# copy of a checkout carries one (scripts/device-copy.sh writes it: such a
# copy may sit inside another checkout, whose `git describe` would be
# wrong), else `git describe` of ROOT ("-dirty" with uncommitted changes).
if [ -f "$1/.qmla-commit" ]; then
  head -n 1 "$1/.qmla-commit"
else
  exec git -C "$1" describe --always --dirty --abbrev=40 --match=NONE
fi
