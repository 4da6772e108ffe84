#!/bin/sh
# Rebuild the followups2 sets' documents under DEST (default /work/heldout-docs) from the Debian
# registry alone (apt-get download + dpkg-deb -x; nothing is installed), and check the sha256 of the
# two .deb files and of the two documents. Idempotent: a document already in place with the right
# sha256 is left alone, and nothing is downloaded where both are.
#
#   sh bench/heldout/followups2/fetch_docs.sh [DEST]
#
# DEST/r-intro/R-intro.html            'An Introduction to R' (R 4.2.2 Patched, 2022-11-10),
#                                      from Debian r-doc-html 4.2.2.20221110-2 (bookworm main),
#                                      /usr/share/R/doc/manual/R-intro.html   (followup2-manual-r-intro.json)
# DEST/gnu-standards/standards.html    'GNU Coding Standards' (last updated August 17, 2021),
#                                      from Debian gnu-standards 2022.03.23-0.1 (bookworm main),
#                                      /usr/share/doc/gnu-standards/standards.html   (followup2-manual-gnu-standards.json)
set -eu
DEST=${1:-/work/heldout-docs}

. "$(dirname "$0")/../debian_fetch.sh"

place 87742ee52d0a01b04aa5d9da5d2e2716ef8b278a681a366f3830192ec27985ed "$DEST/r-intro/R-intro.html" \
    r-doc-html all 4.2.2.20221110-2 \
    2c615dd386993a440b80fd4e9060318386e31fbe47f5be65f295f5fb34002c5c \
    usr/share/R/doc/manual/R-intro.html

place 8983c66376f7c9db00720b54b909a118a0a2bf4d7690a9227c718a7c19778312 "$DEST/gnu-standards/standards.html" \
    gnu-standards all 2022.03.23-0.1 \
    2087dda531c69d8505856a45e0334746f3f25211a237c95d375eed13a7d8c201 \
    usr/share/doc/gnu-standards/standards.html

echo "ok: $DEST/r-intro/R-intro.html $DEST/gnu-standards/standards.html"
