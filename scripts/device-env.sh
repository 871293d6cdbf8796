# scripts/device-env.sh — source on the accelerator machine (after carrying
# .deb/, see scripts/device-prep.sh): unpacks GSL and jansson into /tmp/gslprefix and
# points pkg-config and the loader at it, as docs/device.md describes.
P=/tmp/gslprefix
mkdir -p "$P"
for f in .deb/*.deb; do dpkg -x "$f" "$P"; done
for pc in "$P"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
  grep -q "$P" "$pc" || sed -i "s|/usr|$P/usr|g" "$pc"
done
export PKG_CONFIG_PATH=$P/usr/lib/x86_64-linux-gnu/pkgconfig
export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
