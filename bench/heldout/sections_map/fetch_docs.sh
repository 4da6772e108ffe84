#!/bin/sh
# Rebuild the sections_map sets' documents under DEST (default /work/heldout-docs) from the Debian
# registry alone (apt-get download + dpkg-deb -x; nothing is installed), and check their sha256.
#
#   sh bench/heldout/sections_map/fetch_docs.sh [DEST]
#
# DEST/gnu-maintain/maintain.html   'Information for Maintainers of GNU Software' (last updated 2022-02-26),
#                                   from Debian gnu-standards 2022.03.23-0.1 (bookworm main),
#                                   /usr/share/doc/gnu-standards/maintain.html   (whole-manual-gnu-maintain.json)
# DEST/r-lang/R-lang.html           'R Language Definition' (R 4.2.2 Patched, 2022-11-10),
#                                   from Debian r-doc-html 4.2.2.20221110-2 (bookworm main),
#                                   /usr/share/R/doc/manual/R-lang.html   (whole-manual-r-lang.json)
# DEST/ess/ess.html                 'ESS -- Emacs Speaks Statistics' (ESS version 18.10.3snapshot),
#                                   from Debian elpa-ess 18.10.2+git20220915.f45542e-3 (bookworm main),
#                                   /usr/share/doc/elpa-ess/html/ess.html   (whole-manual-ess.json)
set -eu
DEST=${1:-/work/heldout-docs}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$DEST/gnu-maintain" "$DEST/r-lang" "$DEST/ess"

(cd "$TMP" && apt-get download gnu-standards=2022.03.23-0.1)
dpkg-deb -x "$TMP"/gnu-standards_2022.03.23-0.1_all.deb "$TMP/gnu-standards"
cp "$TMP/gnu-standards/usr/share/doc/gnu-standards/maintain.html" "$DEST/gnu-maintain/maintain.html"

(cd "$TMP" && apt-get download r-doc-html=4.2.2.20221110-2)
dpkg-deb -x "$TMP"/r-doc-html_4.2.2.20221110-2_all.deb "$TMP/r-doc-html"
cp "$TMP/r-doc-html/usr/share/R/doc/manual/R-lang.html" "$DEST/r-lang/R-lang.html"

(cd "$TMP" && apt-get download elpa-ess=18.10.2+git20220915.f45542e-3)
dpkg-deb -x "$TMP"/elpa-ess_18.10.2+git20220915.f45542e-3_all.deb "$TMP/elpa-ess"
cp "$TMP/elpa-ess/usr/share/doc/elpa-ess/html/ess.html" "$DEST/ess/ess.html"

cd "$DEST"
sha256sum -c --quiet <<'SUMS'
82a214f0cfb13117ca00c9d88208b1c8b131a034b2b9497e549febc648cc5c3d  gnu-maintain/maintain.html
d28b1e4794ce321753386ecf14064d066f5b683c28c57629caa0eeeebbce0fca  r-lang/R-lang.html
d2457558249a488dd912cc250d45afad1e5c47e4a91fea5bfaae8c69ac349bc1  ess/ess.html
SUMS
echo "ok: $DEST/gnu-maintain/maintain.html $DEST/r-lang/R-lang.html $DEST/ess/ess.html"
