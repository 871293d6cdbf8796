# scripts/device-env.sh — source on the accelerator machine (after carrying
# .deb/, see scripts/device-prep.sh): unpacks GSL into /tmp/gslprefix and
# points pkg-config and the loader at it, as docs/device.md describes.
P=/tmp/gslprefix
mkdir -p "$P"
for f in .deb/*.deb; do dpkg -x "$f" "$P"; done
sed -i "s|/usr|$P/usr|g" "$P/usr/lib/x86_64-linux-gnu/pkgconfig/gsl.pc"
export PKG_CONFIG_PATH=$P/usr/lib/x86_64-linux-gnu/pkgconfig
export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
